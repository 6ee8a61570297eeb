//! PTX → cubin in a warmed kernel cache. CubeCL caches the PTX NVRTC wrote,
//! and a real driver compiles each PTX module to machine code again when a
//! process first loads it (its JIT; its own cache is per user and empty on a
//! fresh node). `ptxas` does that compilation ahead of time here: each cache
//! entry's PTX is replaced by the cubin for the GPU's exact architecture,
//! which `cuModuleLoadData` loads as it is. CubeCL stores the module as a
//! byte string it hands to the driver unread, so a cubin is as good as PTX.
//!
//! The cache chunk format is CubeCL 0.10's (`cubecl-common`,
//! `compilation_cache.rs`): a sequence of CBOR records `{key, value}` with
//! `value = {entrypoint_name, shared_mem_bytes, ptx}` and `ptx` a list of C
//! `char`s. Nothing in std or a crate envgen uses rewrites it, hence this.

use std::path::{Path, PathBuf};
use std::process::Command;

use ciborium::Value;

use crate::error::{Result, UserError};

/// What one conversion did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Converted {
    pub cubins: usize,
    /// Entries left as PTX, with ptxas's first line (they still load).
    pub failed: Vec<String>,
}

/// The `ptxas` beside the CUDA headers in use (a toolkit or NVIDIA's wheel
/// folder), else the first on `PATH`.
pub fn find_ptxas(cuda_path: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = cuda_path.map(|root| root.join("bin/ptxas")) {
        if p.is_file() {
            return Some(p);
        }
    }
    which::which("ptxas").ok()
}

/// The `-arch` ptxas assembles for on compute capability `cc`: the same
/// target NVRTC compiled for (CubeCL uses `sm_90a` style names from 9.0 on).
pub fn arch((major, minor): (u32, u32)) -> String {
    if major >= 9 {
        format!("sm_{major}{minor}a")
    } else {
        format!("sm_{major}{minor}")
    }
}

/// Replace the PTX of every entry in `model_dir`'s PTX chunks by its cubin,
/// `jobs` ptxas processes at a time.
pub fn convert(model_dir: &Path, ptxas: &Path, arch: &str, jobs: usize) -> Result<Converted> {
    let mut total = Converted::default();
    for chunk in chunks(model_dir) {
        let done = convert_chunk(&chunk, ptxas, arch, jobs)?;
        total.cubins += done.cubins;
        total.failed.extend(done.failed);
    }
    Ok(total)
}

/// `<model>/cuda/<version>/ptx/chunk*.cbor`.
fn chunks(model_dir: &Path) -> Vec<PathBuf> {
    let pattern = format!("{}/cuda/*/ptx/chunk*.cbor", model_dir.display());
    let mut found: Vec<PathBuf> = glob::glob(&pattern)
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    found.sort();
    found
}

fn convert_chunk(chunk: &Path, ptxas: &Path, arch: &str, jobs: usize) -> Result<Converted> {
    let bytes = std::fs::read(chunk)
        .map_err(|e| UserError::environment(format!("cannot read {}: {e}", chunk.display())))?;
    let mut records = read_records(&bytes)
        .map_err(|e| UserError::environment(format!("{}: {e}", chunk.display())))?;
    let scratch = tempfile::Builder::new()
        .prefix("envgen-ptxas-")
        .tempdir()
        .map_err(|e| UserError::environment(format!("cannot create a scratch folder: {e}")))?;
    let todo: Vec<usize> = (0..records.len())
        .filter(|&i| module_of(&records[i]).is_some_and(|m| !m.starts_with(b"\x7fELF")))
        .collect();
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&index) = todo.get(n) else { break };
                let ptx = module_of(&records[index]).expect("filtered above");
                let out = assemble(&ptx, ptxas, arch, &scratch.path().join(n.to_string()));
                results.lock().unwrap().push((index, out));
            });
        }
    });
    let mut converted = Converted::default();
    for (index, out) in results.into_inner().unwrap() {
        match out {
            Ok(cubin) => {
                set_module(&mut records[index], &cubin);
                converted.cubins += 1;
            }
            Err(why) => converted.failed.push(why),
        }
    }
    if converted.cubins > 0 {
        let mut out = Vec::new();
        for record in &records {
            ciborium::into_writer(record, &mut out).map_err(|e| {
                UserError::environment(format!("cannot encode {}: {e}", chunk.display()))
            })?;
        }
        envgen_experiments::fsutil::write_atomic(chunk, &out)?;
    }
    Ok(converted)
}

fn read_records(bytes: &[u8]) -> std::result::Result<Vec<Value>, String> {
    let mut cursor = std::io::Cursor::new(bytes);
    let mut records = Vec::new();
    while (cursor.position() as usize) < bytes.len() {
        let record: Value = ciborium::from_reader(&mut cursor)
            .map_err(|e| format!("not a CubeCL kernel cache chunk: {e}"))?;
        records.push(record);
    }
    Ok(records)
}

/// The `value.ptx` field of a record.
fn field<'a>(map: &'a Value, name: &str) -> Option<&'a Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_text() == Some(name))
        .map(|(_, v)| v)
}

/// The module bytes of a record (PTX text with its NUL, or a cubin).
fn module_of(record: &Value) -> Option<Vec<u8>> {
    let list = field(field(record, "value")?, "ptx")?.as_array()?;
    list.iter()
        .map(|v| {
            let n: i128 = v.as_integer()?.into();
            // C `char` is signed on x86_64 and unsigned on aarch64.
            Some(n as u8)
        })
        .collect()
}

fn set_module(record: &mut Value, module: &[u8]) {
    let signed = std::ffi::c_char::MIN != 0;
    let list: Vec<Value> = module
        .iter()
        .map(|&b| {
            if signed {
                Value::Integer((b as i8).into())
            } else {
                Value::Integer(b.into())
            }
        })
        .collect();
    let Some(value) = record.as_map_mut().and_then(|m| {
        m.iter_mut()
            .find(|(k, _)| k.as_text() == Some("value"))
            .map(|(_, v)| v)
    }) else {
        return;
    };
    if let Some(ptx) = value.as_map_mut().and_then(|m| {
        m.iter_mut()
            .find(|(k, _)| k.as_text() == Some("ptx"))
            .map(|(_, v)| v)
    }) {
        *ptx = Value::Array(list);
    }
}

/// ptxas one module; the cubin, or ptxas's first line.
fn assemble(
    ptx: &[u8],
    ptxas: &Path,
    arch: &str,
    stem: &Path,
) -> std::result::Result<Vec<u8>, String> {
    let text = ptx.strip_suffix(b"\0").unwrap_or(ptx);
    let input = stem.with_extension("ptx");
    let output = stem.with_extension("cubin");
    std::fs::write(&input, text).map_err(|e| e.to_string())?;
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr);
        return Err(log.lines().next().unwrap_or("ptxas failed").to_string());
    }
    std::fs::read(&output).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ptx: &[u8]) -> Value {
        let list = ptx
            .iter()
            .map(|&b| Value::Integer((b as i8).into()))
            .collect();
        Value::Map(vec![
            (Value::Text("key".into()), Value::Integer(7.into())),
            (
                Value::Text("value".into()),
                Value::Map(vec![
                    (
                        Value::Text("entrypoint_name".into()),
                        Value::Text("k".into()),
                    ),
                    (
                        Value::Text("shared_mem_bytes".into()),
                        Value::Integer(0.into()),
                    ),
                    (Value::Text("ptx".into()), Value::Array(list)),
                ]),
            ),
        ])
    }

    #[test]
    fn modules_read_and_write_back_through_the_chunk_format() {
        let mut r = record(b".version 9.0\n\0");
        assert_eq!(module_of(&r).unwrap(), b".version 9.0\n\0");
        let cubin = [0x7f, b'E', b'L', b'F', 0xff, 0x00, 0x80];
        set_module(&mut r, &cubin);
        assert_eq!(module_of(&r).unwrap(), cubin);
        let mut bytes = Vec::new();
        ciborium::into_writer(&r, &mut bytes).unwrap();
        ciborium::into_writer(&record(b"x\0"), &mut bytes).unwrap();
        let back = read_records(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(module_of(&back[0]).unwrap(), cubin);
        assert!(read_records(b"\xff\xff").is_err());
    }

    #[test]
    fn arch_names_follow_nvrtcs_targets() {
        assert_eq!(arch((9, 0)), "sm_90a");
        assert_eq!(arch((12, 0)), "sm_120a");
        assert_eq!(arch((8, 6)), "sm_86");
    }
}
