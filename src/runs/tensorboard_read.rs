//! The reading half of TensorBoard's event files, for
//! `tensorboard_import`: TFRecord framing (u64 length, masked CRC-32C of
//! the length, the bytes, their masked CRC) around `Event` protobufs, the
//! protobuf wire format, and the number in a `Summary.Value`.
//!
//! Read by hand for the same reason it is written by hand
//! (`engine::tensorboard`): the only Rust crates for it are unmaintained or
//! pull a protobuf toolchain, and the part needed is a few fields. Field
//! numbers as TensorBoard 2.21 declares them (the descriptors of
//! `tensorboard/compat/proto/{event,summary,tensor,tensor_shape,types}_pb2.py`):
//! Event: wall_time 1 (double), step 2 (int64), summary 5. Summary: value 1.
//! Summary.Value: tag 1, simple_value 2, obsolete_old_style_histogram 3,
//! image 4, histo 5, audio 6, tensor 8, metadata 9. SummaryMetadata:
//! plugin_data 1 → PluginData.plugin_name 1. TensorProto: dtype 1,
//! tensor_shape 2 (TensorShapeProto: dim 2 → Dim.size 1; unknown_rank 3),
//! tensor_content 4, float_val 5, double_val 6, int_val 7, int64_val 10,
//! bool_val 11, half_val 13, uint32_val 16, uint64_val 17.

use envgen_experiments::engine::tensorboard::crc32c;

/// What a `Summary.Value` holds, as far as the import cares.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// `simple_value`: TF1's and PyTorch's `add_scalar`.
    Simple(f64),
    /// A `tensor`: its one number, or why it has none.
    Tensor(Result<f64, String>),
    /// An image, histogram or audio clip: never a scalar.
    Other(&'static str),
}

/// One `Summary.Value` of an `Event`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventValue {
    /// `Event.step`, an int64 (negative ones are kept here, refused by the import).
    pub step: i64,
    /// `Event.wall_time`, unix seconds; 0 when the writer left it out.
    pub wall_time: f64,
    pub tag: String,
    /// `metadata.plugin_data.plugin_name`, where the value carries it.
    pub plugin: Option<String>,
    pub payload: Payload,
}

fn masked(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The payloads of the whole, intact TFRecords in `bytes`, and how many
/// records failed their checksum (skipped).
pub fn records(mut bytes: &[u8]) -> (Vec<&[u8]>, usize) {
    let mut out = Vec::new();
    let mut corrupt = 0;
    while bytes.len() >= 12 {
        let (len_bytes, rest) = bytes.split_at(8);
        let len_crc = u32::from_le_bytes(rest[..4].try_into().unwrap_or_default());
        if masked(crc32c(len_bytes)) != len_crc {
            break; // not a record boundary: nothing after it can be trusted
        }
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default());
        let rest = &rest[4..];
        let Some(total) = usize::try_from(len).ok().and_then(|l| l.checked_add(4)) else {
            break;
        };
        if rest.len() < total {
            break; // cut short: the writer is still at it
        }
        let (data, crc) = rest[..total].split_at(total - 4);
        if masked(crc32c(data)) == u32::from_le_bytes(crc.try_into().unwrap_or_default()) {
            out.push(data);
        } else {
            corrupt += 1;
        }
        bytes = &rest[total..];
    }
    (out, corrupt)
}

/// A protobuf field's value.
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one protobuf message; stops at the first malformed one.
fn fields(mut bytes: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some((key, rest)) = varint(bytes) else {
            break;
        };
        let (number, wire) = (key >> 3, key & 7);
        let parsed = match wire {
            0 => varint(rest).map(|(v, r)| (Field::Varint(v), r)),
            1 => (rest.len() >= 8).then(|| {
                let (v, r) = rest.split_at(8);
                (Field::Fixed64(le_u64(v)), r)
            }),
            2 => varint(rest).and_then(|(len, r)| {
                let len = usize::try_from(len).ok()?;
                (r.len() >= len).then(|| (Field::Bytes(&r[..len]), &r[len..]))
            }),
            5 => (rest.len() >= 4).then(|| {
                let (v, r) = rest.split_at(4);
                (Field::Fixed32(le_u64(v) as u32), r)
            }),
            _ => None,
        };
        let Some((field, rest)) = parsed else { break };
        out.push((number, field));
        bytes = rest;
    }
    out
}

pub fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// Up to 8 little-endian bytes as an integer.
fn le_u64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// The values of one `Event`'s summary (none for other events).
pub fn event_values(event: &[u8]) -> Vec<EventValue> {
    let event = fields(event);
    let mut step = 0i64;
    let mut wall_time = 0.0;
    for (number, field) in &event {
        match (number, field) {
            (1, Field::Fixed64(v)) => wall_time = f64::from_bits(*v),
            (2, Field::Varint(v)) => step = *v as i64,
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (number, field) in &event {
        let (5, Field::Bytes(summary)) = (number, field) else {
            continue;
        };
        for (number, field) in fields(summary) {
            if let (1, Field::Bytes(value)) = (number, field) {
                out.extend(summary_value(value, step, wall_time));
            }
        }
    }
    out
}

fn summary_value(bytes: &[u8], step: i64, wall_time: f64) -> Option<EventValue> {
    let mut tag = None;
    let mut plugin = None;
    let mut payload = None;
    for (number, field) in fields(bytes) {
        match (number, field) {
            (1, Field::Bytes(t)) => tag = Some(String::from_utf8_lossy(t).into_owned()),
            (2, Field::Fixed32(v)) => payload = Some(Payload::Simple(widen(f32::from_bits(v)))),
            (3 | 5, Field::Bytes(_)) => payload = Some(Payload::Other("a histogram")),
            (4, Field::Bytes(_)) => payload = Some(Payload::Other("an image")),
            (6, Field::Bytes(_)) => payload = Some(Payload::Other("audio")),
            (8, Field::Bytes(t)) => payload = Some(Payload::Tensor(tensor_number(t))),
            (9, Field::Bytes(m)) => plugin = plugin_name(m),
            _ => {}
        }
    }
    Some(EventValue {
        step,
        wall_time,
        tag: tag?,
        plugin,
        payload: payload?,
    })
}

fn plugin_name(metadata: &[u8]) -> Option<String> {
    fields(metadata)
        .into_iter()
        .find_map(|(n, f)| match (n, f) {
            (1, Field::Bytes(data)) => fields(data).into_iter().find_map(|(n, f)| match (n, f) {
                (1, Field::Bytes(name)) => Some(String::from_utf8_lossy(name).into_owned()),
                _ => None,
            }),
            _ => None,
        })
}

/// An f32 as the f64 of its shortest decimal form: `add_scalar("loss", 0.2)`
/// is stored as the f32 nearest 0.2, and reads back as 0.2, not 0.20000000298.
fn widen(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// The numbers of a repeated scalar field, packed (wire type 2) or not.
#[derive(Default)]
struct Repeated {
    fixed32: Vec<u32>,
    fixed64: Vec<u64>,
    varints: Vec<u64>,
}

impl Repeated {
    fn take(&mut self, field: Field<'_>, packed_width: Option<usize>) {
        match field {
            Field::Fixed32(v) => self.fixed32.push(v),
            Field::Fixed64(v) => self.fixed64.push(v),
            Field::Varint(v) => self.varints.push(v),
            Field::Bytes(mut packed) => match packed_width {
                Some(4) => self
                    .fixed32
                    .extend(packed.chunks_exact(4).map(|c| le_u64(c) as u32)),
                Some(_) => self.fixed64.extend(packed.chunks_exact(8).map(le_u64)),
                None => {
                    while let Some((v, rest)) = varint(packed) {
                        self.varints.push(v);
                        packed = rest;
                    }
                }
            },
        }
    }
}

/// A `TensorProto`'s repeated value fields.
#[derive(Default)]
struct Values {
    floats: Repeated,
    doubles: Repeated,
    ints: Repeated,
    int64s: Repeated,
    bools: Repeated,
    halves: Repeated,
    uint32s: Repeated,
    uint64s: Repeated,
}

/// TensorFlow's `DataType` names for the types a scalar can have
/// (types.proto), for messages and for the byte width of `tensor_content`.
fn dtype_name(dtype: u64) -> String {
    let name = match dtype {
        0 => "DT_INVALID",
        1 => "DT_FLOAT",
        2 => "DT_DOUBLE",
        3 => "DT_INT32",
        4 => "DT_UINT8",
        5 => "DT_INT16",
        6 => "DT_INT8",
        7 => "DT_STRING",
        9 => "DT_INT64",
        10 => "DT_BOOL",
        14 => "DT_BFLOAT16",
        17 => "DT_UINT16",
        19 => "DT_HALF",
        22 => "DT_UINT32",
        23 => "DT_UINT64",
        other => return format!("dtype {other}"),
    };
    name.to_string()
}

/// The one number of a `TensorProto`, or why it has none. TensorFlow 2
/// writes `tf.summary.scalar` (a rank-0 DT_FLOAT) as `tensor_content`,
/// the little-endian bytes of the value: `SummaryFileWriter::WriteTensor`
/// calls `Tensor::AsProtoTensorContent` for every non-string tensor
/// (tensorflow/core/summary/summary_file_writer.cc, tensorflow/tensorflow
/// at 021a8fe8). PyTorch's `add_scalar(new_style=True)` uses `float_val`.
fn tensor_number(tensor: &[u8]) -> Result<f64, String> {
    let mut dtype = 0;
    let mut elements: Option<u64> = Some(1);
    let mut content = None;
    let mut v = Values::default();
    for (number, field) in fields(tensor) {
        match (number, field) {
            (1, Field::Varint(v)) => dtype = v,
            (2, Field::Bytes(shape)) => elements = shape_elements(shape),
            (4, Field::Bytes(bytes)) => content = Some(bytes),
            (5, f) => v.floats.take(f, Some(4)),
            (6, f) => v.doubles.take(f, Some(8)),
            (7, f) => v.ints.take(f, None),
            (10, f) => v.int64s.take(f, None),
            (11, f) => v.bools.take(f, None),
            (13, f) => v.halves.take(f, None),
            (16, f) => v.uint32s.take(f, None),
            (17, f) => v.uint64s.take(f, None),
            _ => {}
        }
    }
    let name = dtype_name(dtype);
    match elements {
        Some(1) => {}
        Some(n) => return Err(format!("a {name} tensor of {n} elements, not one number")),
        None => return Err(format!("a {name} tensor of unknown shape")),
    }
    // The value's byte width in tensor_content, how its bits read, and
    // its bits in the repeated field of its type.
    let bits_to_f64: fn(u64) -> f64;
    let (width, field): (usize, Option<u64>) = match dtype {
        1 => {
            bits_to_f64 = |b| widen(f32::from_bits(b as u32));
            (4, v.floats.fixed32.first().map(|&v| u64::from(v)))
        }
        2 => {
            bits_to_f64 = f64::from_bits;
            (8, v.doubles.fixed64.first().copied())
        }
        19 => {
            bits_to_f64 = |b| f64::from(half::f16::from_bits(b as u16));
            (2, v.halves.varints.first().copied())
        }
        14 => {
            bits_to_f64 = |b| f64::from(half::bf16::from_bits(b as u16));
            (2, v.halves.varints.first().copied())
        }
        // int_val holds int32s as sign-extended varints.
        3 => {
            bits_to_f64 = |b| f64::from(b as u32 as i32);
            (4, v.ints.varints.first().copied())
        }
        5 => {
            bits_to_f64 = |b| f64::from(b as u16 as i16);
            (2, v.ints.varints.first().copied())
        }
        6 => {
            bits_to_f64 = |b| f64::from(b as u8 as i8);
            (1, v.ints.varints.first().copied())
        }
        4 => {
            bits_to_f64 = |b| f64::from(b as u8);
            (1, v.ints.varints.first().copied())
        }
        17 => {
            bits_to_f64 = |b| f64::from(b as u16);
            (2, v.ints.varints.first().copied())
        }
        9 => {
            bits_to_f64 = |b| b as i64 as f64;
            (8, v.int64s.varints.first().copied())
        }
        22 => {
            bits_to_f64 = |b| f64::from(b as u32);
            (4, v.uint32s.varints.first().copied())
        }
        23 => {
            bits_to_f64 = |b| b as f64;
            (8, v.uint64s.varints.first().copied())
        }
        10 => {
            bits_to_f64 = |b| f64::from(u8::from(b != 0));
            (1, v.bools.varints.first().copied())
        }
        // No dtype: what older writers of float/double scalars left.
        0 => {
            return v
                .floats
                .fixed32
                .first()
                .map(|&v| widen(f32::from_bits(v)))
                .or_else(|| v.doubles.fixed64.first().map(|&v| f64::from_bits(v)))
                .ok_or_else(|| "a tensor with no dtype and no float_val/double_val".into())
        }
        _ => return Err(format!("a {name} tensor, not a number")),
    };
    match (content, field) {
        (Some(bytes), _) if bytes.len() == width => Ok(bits_to_f64(le_u64(bytes))),
        (Some(bytes), _) => Err(format!(
            "a {name} tensor whose tensor_content has {} bytes, not {width}",
            bytes.len()
        )),
        (None, Some(v)) => Ok(bits_to_f64(v)),
        (None, None) => Err(format!("a {name} tensor with no value")),
    }
}

/// How many elements a `TensorShapeProto` holds (`None`: unknown rank or
/// an unknown dimension).
fn shape_elements(shape: &[u8]) -> Option<u64> {
    let mut elements = 1u64;
    for (number, field) in fields(shape) {
        match (number, field) {
            (2, Field::Bytes(dim)) => {
                let size = fields(dim).into_iter().find_map(|(n, f)| match (n, f) {
                    (1, Field::Varint(v)) => Some(v as i64),
                    _ => None,
                });
                // A dimension without its size field has size 0.
                let size = u64::try_from(size.unwrap_or(0)).ok()?;
                elements = elements.saturating_mul(size);
            }
            (3, Field::Varint(1)) => return None,
            _ => {}
        }
    }
    Some(elements)
}
