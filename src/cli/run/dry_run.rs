//! What `envgen run --dry-run` prints: the plan of a bundled experiment or
//! of a user's command, read from the same JSON document `--json` prints,
//! and a Slurm job script as it would be written.

use serde_json::Value;

/// A command run's `--dry-run`: what would run where, in which checkout,
/// mounted how, and the job script for Slurm.
pub fn print_command_plan(doc: &Value) {
    let words: Vec<String> = doc["argv"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| w.as_str().unwrap_or("").to_string())
        .collect();
    crate::output::outln!(
        "dry run: would run {:?} {} ({}); nothing was created",
        words,
        doc["where"].as_str().unwrap_or("-"),
        doc["where_reason"].as_str().unwrap_or("-"),
    );
    crate::output::outln!("  in {}", doc["workdir"].as_str().unwrap_or("-"));
    if let Some(n) = doc["nproc_per_node"].as_u64() {
        crate::output::outln!("  as {n} processes under torchrun (--nproc-per-node)");
    }
    match doc["git"].as_object() {
        Some(git) => crate::output::outln!(
            "  git {} at {}, uncommitted diff {}, {} untracked file(s)",
            git["toplevel"].as_str().unwrap_or("-"),
            git["commit"].as_str().unwrap_or("(no commit)"),
            git["diff_hash"].as_str().unwrap_or("none"),
            git["untracked"].as_array().map_or(0, Vec::len),
        ),
        None => crate::output::outln!("  not in a git repository (recorded as such)"),
    }
    if let Some(workspace) = doc["workspace"].as_str() {
        let mode = match doc["container"]["writable_workspace"].as_bool() {
            Some(true) => "writable",
            _ => "read-only",
        };
        crate::output::outln!("  mounted {mode} at /workspace: {workspace}");
    }
    if let Some(relaxed) = doc["container"]["relaxed"].as_array() {
        let relaxed: Vec<&str> = relaxed.iter().filter_map(Value::as_str).collect();
        match relaxed.is_empty() {
            true => crate::output::outln!("  container hardened: no network, private IPC"),
            false => crate::output::outln!("  container relaxed: {}", relaxed.join(", ")),
        }
    }
    crate::output::outln!(
        "  run directory: {}",
        doc["run_dir"].as_str().unwrap_or("-")
    );
    print_sbatch_script(doc);
}

/// `--where slurm`: the job script, as it would be written and submitted.
fn print_sbatch_script(doc: &Value) {
    if let Some(script) = doc["sbatch_script"].as_str() {
        match doc["resume"].is_null() {
            true => crate::output::outln!(
                "  job script ({}: named when the run is made):",
                crate::launch::slurm::PLANNED_RUN_DIR
            ),
            false => crate::output::outln!("  job script:"),
        }
        crate::output::outln!("{}", script.trim_end());
    }
}

pub fn print_plan(doc: &Value) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    crate::output::outln!(
        "dry run: {} would train {} on {} (--backend {}), {} rank(s); nothing was created",
        text(&doc["experiment"]),
        text(&doc["where"]),
        text(&doc["backend_planned"]),
        text(&doc["backend"]),
        text(&doc["world_size"]),
    );
    crate::output::outln!("  where: {}", text(&doc["where_reason"]));
    let note = text(&doc["backend_note"]);
    if !note.is_empty() && note != "-" {
        crate::output::outln!("  backend: {note}");
    }
    for run in doc["runs"].as_array().into_iter().flatten() {
        let p = &run["profile"];
        if let Some(dir) = run.get("run_dir") {
            crate::output::outln!("  resume {}", text(dir));
        }
        if let Some(sweep) = run.get("sweep").filter(|s| !s.is_null()) {
            crate::output::outln!(
                "  sweep value {}={}",
                text(&sweep["key"]),
                text(&sweep["value"])
            );
        }
        crate::output::outln!(
            "  preset {}  config_hash {}  global batch {}  parameters {}",
            text(&run["preset"]),
            text(&run["config_hash"]),
            text(&run["global_batch"]),
            text(&run["parameters"]),
        );
        crate::output::outln!(
            "  profile {}: micro-batch {} × {} accumulation, precision {}, device {}, threads {}",
            text(&p["name"]),
            text(&p["micro_batch"]),
            text(&p["grad_accum"]),
            text(&p["precision"]),
            text(&p["device"]),
            text(&p["threads"]),
        );
        if let Some(n) = p.get("gen_batch").filter(|n| !n.is_null()) {
            crate::output::outln!("  generation batch {} rows per call", text(n));
        }
    }
    if doc["resume"].is_null() {
        crate::output::outln!("  run directory: a new one under {}", text(&doc["out"]));
    }
    print_sbatch_script(doc);
}
