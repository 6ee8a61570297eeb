//! The second GPU source: the `nvidia-smi` found on PATH, in its three
//! output forms. The parsers are pure functions on the text so they can be
//! tested on recorded outputs (`tests/fixtures/nvidia-smi/`) and fuzzed.

use std::time::Duration;

use serde::Deserialize;

use super::command::{first_line, run_captured, Captured};
use super::GpuReport;
use crate::host::Gpu;

const TIMEOUT: Duration = Duration::from_secs(10);
const QUERY_FIELDS_WITH_CC: &str = "index,name,compute_cap,memory.total,driver_version,uuid";
/// Drivers before ~510 reject `compute_cap`; the knowledge base fills it from the name.
const QUERY_FIELDS_WITHOUT_CC: &str = "index,name,memory.total,driver_version,uuid";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmiParseError {
    #[error("nvidia-smi printed nothing")]
    Empty,
    #[error("nvidia-smi failed: {0}")]
    Failed(String),
    #[error("CSV line {line}: expected {expected} fields, found {found}: {text:?}")]
    CsvFieldCount {
        line: usize,
        expected: usize,
        found: usize,
        text: String,
    },
    #[error("CSV line {line}: GPU index {value:?} is not a number")]
    CsvIndex { line: usize, value: String },
    #[error("CSV line {line}: driver version {value:?} is not a driver version")]
    CsvDriver { line: usize, value: String },
    #[error("XML: {0}")]
    Xml(String),
    #[error("{form}: no driver version found")]
    NoDriver { form: &'static str },
}

/// The message nvidia-smi prints when it cannot reach the kernel driver.
fn failure_message(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|line| {
            line.starts_with("NVIDIA-SMI has failed") || line.starts_with("No devices were found")
        })
        .map(str::to_string)
}

fn not_available(value: &str) -> bool {
    let value = value.trim();
    value.is_empty() || value.starts_with('[') || value.eq_ignore_ascii_case("N/A")
}

/// "24576", "24576 MiB", "81559MiB" → 24576 / 81559.
fn parse_mib(value: &str) -> Option<u64> {
    let digits: String = value
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Parse `nvidia-smi --query-gpu=index,name[,compute_cap],memory.total,driver_version,uuid
/// --format=csv,noheader,nounits`. Returns the GPUs and the driver version
/// (the CSV does not carry the CUDA driver version).
pub fn parse_query_csv(text: &str, with_compute_cap: bool) -> Result<GpuReport, SmiParseError> {
    if let Some(message) = failure_message(text) {
        return Err(SmiParseError::Failed(message));
    }
    let expected = if with_compute_cap { 6 } else { 5 };
    let mut report = GpuReport::default();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line_no = number + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != expected {
            return Err(SmiParseError::CsvFieldCount {
                line: line_no,
                expected,
                found: fields.len(),
                text: line.to_string(),
            });
        }
        let (index, name) = (fields[0], fields[1]);
        let (compute_cap, rest) = if with_compute_cap {
            (Some(fields[2]), &fields[3..])
        } else {
            (None, &fields[2..])
        };
        let (memory, driver, uuid) = (rest[0], rest[1], rest[2]);
        let index = index.parse().map_err(|_| SmiParseError::CsvIndex {
            line: line_no,
            value: index.to_string(),
        })?;
        if !super::proc::is_driver_version(driver) {
            return Err(SmiParseError::CsvDriver {
                line: line_no,
                value: driver.to_string(),
            });
        }
        report
            .driver_version
            .get_or_insert_with(|| driver.to_string());
        report.gpus.push(Gpu {
            index,
            name: name.to_string(),
            compute_capability: compute_cap
                .filter(|cc| !not_available(cc))
                .map(str::to_string),
            memory_mib: parse_mib(memory),
            uuid: (!not_available(uuid)).then(|| uuid.to_string()),
            ..Gpu::default()
        });
    }
    if report.driver_version.is_none() {
        return Err(SmiParseError::Empty);
    }
    Ok(report)
}

#[derive(Debug, Deserialize)]
struct XmlLog {
    driver_version: Option<String>,
    cuda_version: Option<String>,
    #[serde(rename = "gpu", default)]
    gpus: Vec<XmlGpu>,
}

#[derive(Debug, Deserialize)]
struct XmlGpu {
    product_name: Option<String>,
    uuid: Option<String>,
    minor_number: Option<String>,
    fb_memory_usage: Option<XmlMemory>,
}

#[derive(Debug, Deserialize)]
struct XmlMemory {
    total: Option<String>,
}

/// Parse `nvidia-smi -q -x` (root element `<nvidia_smi_log>`).
pub fn parse_xml(text: &str) -> Result<GpuReport, SmiParseError> {
    if let Some(message) = failure_message(text) {
        return Err(SmiParseError::Failed(message));
    }
    if text.trim().is_empty() {
        return Err(SmiParseError::Empty);
    }
    let log: XmlLog =
        quick_xml::de::from_str(text).map_err(|err| SmiParseError::Xml(err.to_string()))?;
    let driver_version = log
        .driver_version
        .map(|v| v.trim().to_string())
        .filter(|v| super::proc::is_driver_version(v))
        .ok_or(SmiParseError::NoDriver { form: "XML" })?;
    let gpus = log
        .gpus
        .into_iter()
        .enumerate()
        .map(|(index, gpu)| Gpu {
            index: index as u32,
            name: gpu.product_name.unwrap_or_default().trim().to_string(),
            memory_mib: gpu
                .fb_memory_usage
                .and_then(|memory| memory.total)
                .and_then(|total| parse_mib(&total)),
            uuid: gpu
                .uuid
                .map(|u| u.trim().to_string())
                .filter(|u| !not_available(u)),
            minor_number: gpu.minor_number.and_then(|m| m.trim().parse().ok()),
            ..Gpu::default()
        })
        .collect();
    Ok(GpuReport {
        driver_version: Some(driver_version),
        cuda_driver_version: log
            .cuda_version
            .map(|v| v.trim().to_string())
            .filter(|v| !not_available(v)),
        gpus,
    })
}

/// The token after `label` on `line` ("Driver Version: 535.261.03" → "535.261.03").
fn value_after<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let start = line.find(label)? + label.len();
    line.get(start..)?.split_whitespace().next()
}

/// Parse the plain `nvidia-smi` table: the header line
/// `| NVIDIA-SMI 535.261.03   Driver Version: 535.261.03   CUDA Version: 12.2 |`
/// and, below the first `|===…` rule, one block per GPU whose first row is
/// `|   0  NVIDIA A30   On  | …` and whose second row holds `4MiB / 24576MiB`.
pub fn parse_table(text: &str) -> Result<GpuReport, SmiParseError> {
    if let Some(message) = failure_message(text) {
        return Err(SmiParseError::Failed(message));
    }
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .find(|line| line.contains("Driver Version:"))
        .ok_or(SmiParseError::NoDriver { form: "table" })?;
    let driver_version = value_after(header, "Driver Version:")
        .filter(|v| super::proc::is_driver_version(v))
        .ok_or(SmiParseError::NoDriver { form: "table" })?
        .to_string();
    let cuda_driver_version = value_after(header, "CUDA Version:")
        .filter(|v| !not_available(v))
        .map(str::to_string);

    let mut gpus = Vec::new();
    // The GPU section runs from the first `|===` rule to the first line that
    // is not part of a box (the blank line before the Processes table).
    let start = lines.iter().position(|line| line.starts_with("|="));
    if let Some(start) = start {
        let section = lines[start + 1..]
            .iter()
            .take_while(|line| line.starts_with('|') || line.starts_with('+'));
        let rows: Vec<&&str> = section.collect();
        for (position, row) in rows.iter().enumerate() {
            let Some(first_cell) = row.split('|').nth(1) else {
                continue;
            };
            let Some((index, name)) = gpu_row(first_cell) else {
                continue;
            };
            let memory_mib = rows
                .get(position + 1)
                .and_then(|next| next.split('|').nth(2))
                .and_then(|cell| cell.split('/').nth(1))
                .and_then(parse_mib_cell);
            gpus.push(Gpu {
                index,
                name,
                memory_mib,
                ..Gpu::default()
            });
        }
    }
    Ok(GpuReport {
        driver_version: Some(driver_version),
        cuda_driver_version,
        gpus,
    })
}

/// "   0  NVIDIA A30                     On  " → (0, "NVIDIA A30").
/// The cell ends with the persistence mode (On/Off); the name may be cut with "...".
fn gpu_row(cell: &str) -> Option<(u32, String)> {
    let mut words: Vec<&str> = cell.split_whitespace().collect();
    if words.len() < 3 || !matches!(words.last(), Some(&"On") | Some(&"Off")) {
        return None;
    }
    words.pop();
    let index = words.first()?.parse().ok()?;
    Some((index, words[1..].join(" ")))
}

/// " 24576MiB " → 24576 (only values that carry the MiB unit).
fn parse_mib_cell(cell: &str) -> Option<u64> {
    let cell = cell.trim();
    cell.strip_suffix("MiB").and_then(|n| n.trim().parse().ok())
}

/// Run the `nvidia-smi` on PATH and merge its forms: the CSV query
/// for the GPUs, then the XML (or the table) for the CUDA driver version.
pub fn probe(notes: &mut Vec<String>) -> Option<GpuReport> {
    let path = which::which("nvidia-smi").ok()?;
    let run = |args: &[&str]| -> Result<Captured, String> {
        run_captured(&path, args, TIMEOUT).map_err(|err| err.to_string())
    };
    let query = |fields: &str, with_cc: bool| -> Result<GpuReport, String> {
        let out = run(&[
            &format!("--query-gpu={fields}"),
            "--format=csv,noheader,nounits",
        ])?;
        if !out.status.success() {
            return Err(first_line(&out.all_output()));
        }
        parse_query_csv(&out.stdout, with_cc).map_err(|err| err.to_string())
    };
    let structured = |args: &[&str], parse: fn(&str) -> Result<GpuReport, SmiParseError>| {
        let out = run(args)?;
        let text = if out.status.success() {
            out.stdout
        } else {
            out.all_output()
        };
        parse(&text).map_err(|err| err.to_string())
    };

    let csv = query(QUERY_FIELDS_WITH_CC, true).or_else(|first| {
        tracing::debug!("nvidia-smi query with compute_cap failed ({first}); retrying without it");
        query(QUERY_FIELDS_WITHOUT_CC, false)
    });
    let detailed = structured(&["-q", "-x"], parse_xml).or_else(|xml_err| {
        tracing::debug!("nvidia-smi -q -x: {xml_err}");
        structured(&[], parse_table)
    });
    match (csv, detailed) {
        (Ok(mut report), Ok(detail)) => {
            report.cuda_driver_version = detail.cuda_driver_version;
            // The XML knows each GPU's device minor; the CSV and XML list GPUs in the same order.
            for (gpu, other) in report.gpus.iter_mut().zip(detail.gpus) {
                gpu.minor_number = gpu.minor_number.or(other.minor_number);
            }
            Some(report)
        }
        (Ok(report), Err(err)) => {
            notes.push(format!("nvidia-smi: CUDA driver version unknown ({err})"));
            Some(report)
        }
        (Err(_), Ok(report)) => Some(report),
        (Err(err), Err(_)) => {
            notes.push(format!("nvidia-smi: {err}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_and_without_compute_cap() {
        let report = parse_query_csv(
            "0, NVIDIA A30, 8.0, 24576, 535.261.03, GPU-11111111-2222-3333-4444-555555555555\n",
            true,
        )
        .unwrap();
        assert_eq!(report.driver_version.as_deref(), Some("535.261.03"));
        assert_eq!(report.gpus[0].compute_capability.as_deref(), Some("8.0"));
        assert_eq!(report.gpus[0].memory_mib, Some(24576));

        let report = parse_query_csv("0, Tesla T4, 15360, 470.256.02, GPU-aa\n", false).unwrap();
        assert_eq!(report.gpus[0].name, "Tesla T4");
        assert_eq!(report.gpus[0].compute_capability, None);
    }

    #[test]
    fn csv_rejects_wrong_shapes() {
        assert!(matches!(
            parse_query_csv("0, NVIDIA A30, 24576\n", true),
            Err(SmiParseError::CsvFieldCount { .. })
        ));
        assert_eq!(parse_query_csv("", true), Err(SmiParseError::Empty));
        assert!(matches!(
            parse_query_csv("x, NVIDIA A30, 8.0, 24576, 535.261.03, GPU-1\n", true),
            Err(SmiParseError::CsvIndex { .. })
        ));
        assert!(matches!(
            parse_query_csv(
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                true
            ),
            Err(SmiParseError::Failed(_))
        ));
    }

    #[test]
    fn xml_without_gpus_and_garbage() {
        let report = parse_xml(
            "<nvidia_smi_log><driver_version>580.65.06</driver_version><cuda_version>13.0</cuda_version></nvidia_smi_log>",
        )
        .unwrap();
        assert_eq!(report.cuda_driver_version.as_deref(), Some("13.0"));
        assert!(report.gpus.is_empty());
        assert!(parse_xml("<<<").is_err());
        assert!(parse_xml("<nvidia_smi_log></nvidia_smi_log>").is_err());
    }

    #[test]
    fn table_row_shapes() {
        assert_eq!(
            gpu_row("   0  NVIDIA A30                     On  "),
            Some((0, "NVIDIA A30".to_string()))
        );
        assert_eq!(gpu_row(" N/A   33C    P0   29W / 165W "), None);
        assert_eq!(parse_mib_cell("  24576MiB "), Some(24576));
        assert!(parse_table("hello").is_err());
    }
}
