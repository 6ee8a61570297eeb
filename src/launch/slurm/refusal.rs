//! sbatch refusing a job (issue #39): its own words, always, and a fix
//! that matches them — a partition, QOS or account the cluster does not
//! have, a node shape no node has, a limit of jobs reached — instead of
//! "check that slurmctld is reachable" for all of them.

use crate::error::UserError;

/// What the job asked for, to name in a fix (`--cpus-per-task 8 …`).
pub struct Asked<'a> {
    pub script: &'a str,
    pub resources: String,
}

/// Known refusals: a piece of sbatch's message (lowercase) and the fix.
fn fix_for(stderr: &str, asked: &Asked) -> String {
    let text = stderr.to_lowercase();
    let has = |needle: &str| text.contains(needle);
    if has("invalid partition") {
        "`sinfo -s` lists the partitions you can use: pass one with --partition NAME, or leave --partition out for the cluster's default".into()
    } else if has("invalid qos") {
        "`sacctmgr show assoc user=$USER format=account,partition,qos` lists the QOS you may use: pass one with --qos NAME, or leave --qos out".into()
    } else if has("invalid account") {
        "`sacctmgr show assoc user=$USER format=account,partition` lists your accounts and the partitions each may use: pass one with --account NAME".into()
    } else if has("requested node configuration is not available") {
        format!(
            "no node of the partition has what the job asks for ({}): `sinfo -o '%P %c %m %G %f'` shows each partition's CPUs, memory, GRES and features; lower --cpus-per-task, --mem or the GPUs, or pick another --partition",
            asked.resources
        )
    } else if has("invalid generic resource") || has("invalid gres") {
        "`sinfo -o '%P %G'` lists the GRES each partition's nodes have: e.g. --gres gpu:a30:1"
            .into()
    } else if has("invalid feature") {
        "`sinfo -o '%P %f'` lists the node features --constraint can name".into()
    } else if has("maxsubmit") || has("job violates accounting/qos policy") || has("qosmax") {
        "you have as many jobs queued as your account or QOS allows (`sacctmgr show assoc user=$USER format=account,qos,maxsubmit`): wait for some to end (`squeue -u $USER`) or cancel them, then run again".into()
    } else if has("requested time limit") {
        "`sinfo -o '%P %l'` shows each partition's time limit: ask for less with --time".into()
    } else if has("unable to contact slurm controller") || has("socket timed out") {
        "check that slurmctld is reachable (`sinfo`) and SLURM_CONF points at the right cluster"
            .into()
    } else {
        format!(
            "sbatch's reason is above; the script it refused is {} (`sbatch` it by hand to try a change)",
            asked.script
        )
    }
}

/// The error for `sbatch` exiting with `stderr`: sbatch's lines as they
/// were (control characters escaped, so nothing it printed can rewrite the
/// terminal), and the fix that matches them. Exit 3: the cluster refused.
pub fn explain(stderr: &str, asked: &Asked) -> anyhow::Error {
    let words: Vec<String> = stderr
        .trim()
        .lines()
        .map(|line| {
            line.chars()
                .map(|c| match c.is_control() {
                    true => c.escape_debug().to_string(),
                    false => c.to_string(),
                })
                .collect::<String>()
        })
        .collect();
    let said = if words.is_empty() {
        "(it printed nothing)".to_string()
    } else {
        words.join("\n  ")
    };
    UserError::environment(format!("sbatch refused the job:\n  {said}"))
        .with_fix(fix_for(stderr, asked))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Asked<'static> {
        Asked {
            script: "/runs/r1/job.sbatch",
            resources: "--cpus-per-task 8, --gpus-per-node 1".into(),
        }
    }

    /// sbatch's messages as Slurm 22–24 print them, each to its own fix.
    #[test]
    fn each_known_refusal_gets_its_own_fix() {
        for (stderr, fix) in [
            ("sbatch: error: invalid partition specified: nosuchpart\nsbatch: error: Batch job submission failed: Invalid partition name specified", "sinfo -s"),
            ("sbatch: error: Batch job submission failed: Invalid qos specification", "--qos NAME"),
            ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified", "--account NAME"),
            ("sbatch: error: Batch job submission failed: Requested node configuration is not available", "(--cpus-per-task 8, --gpus-per-node 1)"),
            ("sbatch: error: Invalid generic resource (gres) specification", "--gres gpu:a30:1"),
            ("sbatch: error: Batch job submission failed: Invalid feature specification", "--constraint"),
            ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)", "--time"),
            ("sbatch: error: AssocMaxSubmitJobLimit\nsbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)", "squeue -u $USER"),
            ("sbatch: error: QOSMaxSubmitJobPerUserLimit", "squeue -u $USER"),
            ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", "slurmctld is reachable"),
            ("sbatch: error: something new", "/runs/r1/job.sbatch"),
        ] {
            let err = explain(stderr, &asked());
            assert_eq!(crate::error::exit_code_of(&err), 3, "{stderr}");
            let text = crate::error::render(&err);
            assert!(text.contains(fix), "{stderr}: {text}");
            // sbatch's own words are always there.
            let last = stderr.lines().last().unwrap();
            assert!(text.contains(last), "{text}");
        }
    }

    /// Whatever sbatch printed cannot move the cursor or start a line
    /// that looks like envgen's.
    #[test]
    fn sbatch_output_is_shown_escaped() {
        let err = explain("sbatch: error: \x1b[2Jgone\rX\nfix: fake", &asked());
        let text = crate::error::render(&err);
        assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
        assert!(text.contains("\\u{1b}[2Jgone\\rX"), "{text}");
        assert!(text.contains("\n  fix: fake"), "{text}");
        let empty = crate::error::render(&explain("", &asked()));
        assert!(empty.contains("(it printed nothing)"), "{empty}");
    }
}
