//! Slurm as seen from this host: `sinfo` version, partitions and GRES.

use std::time::Duration;

use super::command::{first_version_token, last_line, run_tool};
use crate::host::Slurm;

/// sinfo asks the controller; an unreachable one must not stall doctor.
const TIMEOUT: Duration = Duration::from_secs(3);

/// One entry per non-empty line, without sinfo's default-partition `*`
/// marker and `(null)` placeholders, in first-seen order, without repeats.
pub fn parse_list(text: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for line in text.lines() {
        let item = line.trim().trim_end_matches('*');
        if item.is_empty() || item == "(null)" || items.iter().any(|seen| seen == item) {
            continue;
        }
        items.push(item.to_string());
    }
    items
}

/// `None` when `sinfo` is not installed.
pub fn probe(notes: &mut Vec<String>) -> Option<Slurm> {
    let version = run_tool("sinfo", &["--version"], TIMEOUT)?;
    if !version.status.success() {
        // Installed but without a slurm.conf (or a reachable config server).
        notes.push(format!(
            "slurm: sinfo is installed but not usable: {}",
            last_line(&version.all_output())
        ));
        return Some(Slurm::default());
    }
    let mut list = |format: &str, what: &str| -> Vec<String> {
        match run_tool("sinfo", &["-h", "-o", format], TIMEOUT) {
            Some(out) if out.status.success() => parse_list(&out.stdout),
            Some(out) => {
                notes.push(format!(
                    "slurm: cannot list {what}: {}",
                    last_line(&out.stderr)
                ));
                Vec::new()
            }
            None => {
                notes.push(format!(
                    "slurm: `sinfo -o {format}` did not answer within {TIMEOUT:?}"
                ));
                Vec::new()
            }
        }
    };
    let partitions = list("%P", "partitions");
    let gres = if partitions.is_empty() {
        Vec::new()
    } else {
        list("%G", "GRES")
    };
    Some(Slurm {
        version: first_version_token(&version.stdout),
        partitions,
        gres,
    })
}

/// The GRES lines of `partition` (all partitions when `None`); empty when
/// sinfo is missing or does not answer.
pub fn partition_gres(partition: Option<&str>) -> Vec<String> {
    let mut args = vec!["-h", "-o", "%G"];
    if let Some(partition) = partition {
        args.extend(["-p", partition]);
    }
    match run_tool("sinfo", &args, TIMEOUT) {
        Some(out) if out.status.success() => parse_list(&out.stdout),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("debug*\ngpu\ngpu\n"), vec!["debug", "gpu"]);
        assert_eq!(parse_list("(null)\ngpu:a30:2\n"), vec!["gpu:a30:2"]);
        assert!(parse_list("").is_empty());
    }
}
