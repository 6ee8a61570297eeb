//! The `#SBATCH` lines a user adds beside the ones envgen writes (issue
//! #39): `--qos`, `--gres`, `--constraint`, `--job-name`, and raw options
//! through `--sbatch-arg` (or a profile's `[slurm] extra`); and the CPUs a
//! GPU job gets when none are asked for.
//!
//! sbatch reads `#SBATCH` lines with its own parser, not a shell: a word
//! ends at whitespace, `"` and `\` quote and escape, an unquoted `#` starts
//! a comment, and a newline ends the directive (the next line would be a
//! command of the job). Every value here keeps clear of all of them, so
//! what is written is what sbatch reads, one option per line.

use crate::error::{Result, UserError};

/// CPUs per GPU a GPU job gets when neither `--cpus-per-task` nor the
/// profile says: PyTorch's DataLoader runs one process per worker, and
/// input pipelines starve a GPU below ~4–8 workers (NVIDIA's NGC
/// containers and DGX nodes give 8 or more cores per GPU). Slurm's own
/// default is 1 CPU per task, which leaves the GPU waiting on data.
pub const CPUS_PER_GPU: u32 = 8;

/// `--cpus-per-task` when nothing set it: [`CPUS_PER_GPU`] for each GPU a
/// task drives (an envgen rank drives one; a command's torchrun task drives
/// the node's), 1 for a CPU job (Slurm's default, as before).
pub fn default_cpus_per_task(gpus_per_node: Option<u32>, tasks_per_node: u32) -> u32 {
    match gpus_per_node.filter(|&g| g > 0) {
        Some(gpus) => gpus
            .div_ceil(tasks_per_node.max(1))
            .saturating_mul(CPUS_PER_GPU),
        None => 1,
    }
}

/// The GPUs per node a `--gres` value asks for: `gpu` (1), `gpu:2`,
/// `gpu:a30:1`, within a comma list (`gpu:a30:2,shard:1`); `None` when it
/// names no GPU.
pub fn gres_gpus(gres: &str) -> Option<u32> {
    gres.split(',').find_map(|item| {
        let mut parts = item.split(':');
        if parts.next() != Some("gpu") {
            return None;
        }
        let last = parts.last();
        Some(last.and_then(|n| n.parse().ok()).unwrap_or(1))
    })
}

/// Check a value that goes into an `#SBATCH --FLAG=VALUE` line. sbatch
/// reads those lines itself (no shell quoting applies there), and a newline
/// would end the directive block and become a command of the job: so each
/// value keeps to the alphabet Slurm gives it — names (`--partition`,
/// `--account`, `--qos`, `--job-name`, comma lists of them), times
/// (`1-02:00:00`, `UNLIMITED`), sizes (`32G`, `500M`), GRES (`gpu:a30:1`)
/// and feature expressions (`a100&ib`, `[rack1|rack2]`, `gpu*2`). Refused
/// values are usage errors naming the flag.
pub fn check_directive(flag: &str, value: &str) -> Result<()> {
    let allowed = |c: char| match flag {
        "--time" | "--mem" => c.is_ascii_alphanumeric() || c == ':' || c == '-',
        "--gres" => c.is_ascii_alphanumeric() || "_-.,:".contains(c),
        "--constraint" => c.is_ascii_alphanumeric() || "_-.,:&|[]*()".contains(c),
        _ => c.is_ascii_alphanumeric() || "_-.,".contains(c),
    };
    if !value.is_empty() && value.len() <= 128 && value.chars().all(allowed) {
        return Ok(());
    }
    let example = match flag {
        "--time" => "e.g. --time 01:30:00 or --time 2-00:00:00",
        "--mem" => "e.g. --mem 32G",
        "--gres" => "e.g. --gres gpu:a30:1 (NAME[:TYPE][:COUNT], comma-separated)",
        "--constraint" => "e.g. --constraint 'a100&ib' (features joined by & | [ ] * ( ))",
        _ => "a Slurm name: letters, digits, '_', '-', '.' (a list: comma-separated)",
    };
    Err(
        UserError::usage(format!("{flag} {value:?}: not a value sbatch accepts here"))
            .with_fix(example)
            .into(),
    )
}

/// Options envgen writes itself, and what sets each instead. sbatch takes
/// any unambiguous abbreviation of a long option (`--part` is
/// `--partition`), so a name that begins one of these is refused too.
const WRITTEN_BY_ENVGEN: &[(&str, &str)] = &[
    ("job-name", "use --job-name NAME"),
    (
        "output",
        "envgen writes the job's output to slurm.out in the run directory",
    ),
    (
        "error",
        "envgen writes the job's errors to slurm.out in the run directory",
    ),
    ("nodes", "use --nodes N"),
    (
        "ntasks-per-node",
        "envgen runs one task per rank: use --ranks N and --nodes N",
    ),
    ("cpus-per-task", "use --cpus-per-task N"),
    ("partition", "use --partition NAME"),
    ("account", "use --account NAME"),
    ("time", "use --time LIMIT"),
    ("mem", "use --mem SIZE"),
    (
        "gpus-per-node",
        "use --gpus-per-node N (or --gres gpu:TYPE:N)",
    ),
    ("qos", "use --qos NAME"),
    ("gres", "use --gres SPEC"),
    ("constraint", "use --constraint FEATURES"),
    (
        "array",
        "use --sweep KEY=V1,V2,… (one array task per value)",
    ),
    (
        "chdir",
        "the job starts in its run directory, which envgen chooses (--out)",
    ),
];

/// Check one `--sbatch-arg` (or `[slurm] extra` entry): `--OPTION` or
/// `--OPTION=VALUE`, one option, written as its own `#SBATCH` line.
/// `source` names where it came from, for the error.
pub fn check_sbatch_arg(source: &str, arg: &str) -> Result<()> {
    let refuse = |why: String, fix: &str| -> anyhow::Error {
        UserError::usage(format!("{source} {arg:?}: {why}"))
            .with_fix(fix.to_string())
            .into()
    };
    let example = "e.g. --sbatch-arg=--mail-type=END (one option per --sbatch-arg)";
    let Some(body) = arg.strip_prefix("--") else {
        return Err(refuse(
            "not a long sbatch option (it must start with `--`)".into(),
            example,
        ));
    };
    let (name, value) = match body.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (body, None),
    };
    let name_ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !name_ok {
        return Err(refuse(
            "the option name may hold only lowercase letters, digits and `-`".into(),
            example,
        ));
    }
    // What sbatch's directive parser would read other than as written.
    let unsafe_char = |c: char| c.is_whitespace() || c.is_control() || "\"\\#".contains(c);
    if let Some(c) = value.and_then(|v| v.chars().find(|&c| unsafe_char(c))) {
        return Err(refuse(
            format!("{c:?} cannot be written in an #SBATCH line (sbatch splits, quotes or ends the line there)"),
            "give a value without spaces, quotes, `\\` or `#`",
        ));
    }
    if arg.len() > 256 || !arg.is_ascii() {
        return Err(refuse("longer than 256 bytes or not ASCII".into(), example));
    }
    if let Some((option, fix)) = WRITTEN_BY_ENVGEN.iter().find(|(o, _)| o.starts_with(name)) {
        let why = if *option == name {
            format!("envgen writes --{option} itself")
        } else {
            format!("sbatch reads --{name} as --{option}, which envgen writes itself")
        };
        return Err(refuse(why, fix));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_jobs_get_cpus_per_gpu_and_cpu_jobs_one() {
        assert_eq!(default_cpus_per_task(None, 1), 1);
        assert_eq!(default_cpus_per_task(Some(0), 1), 1);
        // One rank per GPU: 8 CPUs each.
        assert_eq!(default_cpus_per_task(Some(4), 4), CPUS_PER_GPU);
        // A command's single torchrun task drives the node's 4 GPUs.
        assert_eq!(default_cpus_per_task(Some(4), 1), 4 * CPUS_PER_GPU);
        assert_eq!(default_cpus_per_task(Some(u32::MAX), 1), u32::MAX);
    }

    #[test]
    fn gres_names_its_gpu_count() {
        assert_eq!(gres_gpus("gpu"), Some(1));
        assert_eq!(gres_gpus("gpu:2"), Some(2));
        assert_eq!(gres_gpus("gpu:a30:1"), Some(1));
        assert_eq!(gres_gpus("shard:1,gpu:h100:4"), Some(4));
        assert_eq!(gres_gpus("gpu:a30"), Some(1));
        assert_eq!(gres_gpus("shard:2"), None);
        assert_eq!(gres_gpus("gpus:2"), None);
    }

    #[test]
    fn raw_sbatch_args_are_one_safe_option_not_written_by_envgen() {
        for good in [
            "--mail-type=END",
            "--mail-user=me@example.org",
            "--exclusive",
            "--signal=B:USR1@120",
            "--mem-per-gpu=40G",
            "--time-min=00:30:00",
            "--gres-flags=enforce-binding",
        ] {
            check_sbatch_arg("--sbatch-arg", good).unwrap();
        }
        for (bad, says) in [
            ("-q high", "must start with `--`"),
            ("mail-type=END", "must start with `--`"),
            ("--", "lowercase letters"),
            ("--Mail=x", "lowercase letters"),
            ("--comment=two words", "' '"),
            ("--comment=a\n#SBATCH --uid=0", "'\\n'"),
            ("--comment=\"x", "'\"'"),
            ("--comment=a#b", "'#'"),
            ("--comment=a\\b", "'\\\\'"),
            ("--comment=a\0b", "'\\0'"),
            ("--qos=high", "envgen writes --qos itself"),
            ("--output=/tmp/x", "envgen writes --output itself"),
            ("--part=debug", "reads --part as --partition"),
            ("--gpus=2", "reads --gpus as --gpus-per-node"),
            ("--ntasks=4", "reads --ntasks as --ntasks-per-node"),
        ] {
            let err = check_sbatch_arg("--sbatch-arg", bad).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{bad:?}");
            let text = crate::error::render(&err);
            assert!(text.contains(says), "{bad:?}: {text}");
        }
        let err = check_sbatch_arg("--sbatch-arg", "--qos=high").unwrap_err();
        assert!(crate::error::render(&err).contains("use --qos NAME"));
    }
}
