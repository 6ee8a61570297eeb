//! A user command as a kind of run (`envgen run [flags] -- CMD ARGS…`,
//! issue #25). It goes through the same seam as the bundled experiments:
//! [`UserCommand`] is an [`Experiment`] named `command` whose science
//! config is the command line and its directory (`config.toml`:
//! `[command] argv = […]`, `workdir = "…"`), so the plan, the run
//! directory, the lock, Ctrl-C, `summary.json`, `--resume`, `rerun` and
//! `runs list/show/compare/cancel/watch` work on it unchanged; a launched
//! run (`envgen run command --launched --resume DIR`) finds the command in
//! its `config.toml`. What it ran with (git state, environment) is
//! recorded by `runs::command_record`; running it is [`super::command_exec`].
//! Places: natively, in Docker (the code mounted read-only at
//! `/workspace`, `mounts::add_workspace`) and as a Slurm job on the node
//! (same paths; a Slurm `--container` is refused for now).

use std::path::Path;

use envgen_experiments::backend::{self, BackendChoice};
use envgen_experiments::engine::{HardwareHint, RunControl, Status, Summary};
use envgen_experiments::registry::{self, typed, Experiment, ResolvedConfig};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::flags::RunFlags;
use crate::error::{Result, UserError};
use crate::runs::command_record::{self, CommandRecord, DIFF_FILE};
use crate::runs::manifest::{self, HardwareKnobs};

/// The experiment name of a command run (manifest, `runs list`, run ids).
pub const NAME: &str = "command";

pub use super::command_exec::CommandLine;

/// `config.toml` of a command run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    pub command: CommandLine,
}

/// A command about to become a run: its config, the record for the
/// manifest and the uncommitted diff to save as `diff.patch`.
pub struct CommandSpec {
    pub config: CommandConfig,
    pub record: CommandRecord,
    pub diff: Option<Vec<u8>>,
}

impl CommandSpec {
    /// The config as the plan resolves experiments' configs; `sweep_values`
    /// (`KEY=VALUE`, one per `--sweep`) applied by [`with_sweep_values`].
    pub fn resolved(&self, sweep_values: &[String]) -> Result<ResolvedConfig> {
        resolved_config(&with_sweep_values(&self.config, sweep_values)?)
    }

    /// A short name for run ids: the script (`train.py` → `train`), else
    /// the program (`torchrun`), in letters, digits, `-` and `_`.
    pub fn label(&self) -> String {
        let argv = &self.config.command.argv;
        let word = argv
            .iter()
            .find(|w| [".py", ".sh"].iter().any(|e| w.ends_with(e)))
            .or(argv.first())
            .map(String::as_str)
            .unwrap_or(NAME);
        let base = Path::new(word)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let clean: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(32)
            .collect();
        if clean.is_empty() {
            NAME.into()
        } else {
            clean
        }
    }

    /// Save the diff beside the manifest (before the manifest names its hash).
    pub fn write_diff(&self, dir: &Path) -> Result<()> {
        if let Some(diff) = &self.diff {
            envgen_experiments::fsutil::write_atomic(&dir.join(DIFF_FILE), diff)?;
        }
        Ok(())
    }
}

/// The experiment `flags` name: a bundled one, or `command` for `-- CMD`
/// (and for a command run reopened with --resume, --from-run or --launched).
pub fn find_experiment(flags: &RunFlags) -> Result<&'static dyn Experiment> {
    if flags.experiment == NAME {
        let reopened = flags.resume.is_some() || flags.from_run.is_some();
        if flags.command.is_empty() && !reopened {
            return Err(
                UserError::usage("envgen run command: the command is missing")
                    .with_fix("give it after `--`: envgen run -- python train.py --lr 3e-4")
                    .into(),
            );
        }
        return Ok(&USER_COMMAND);
    }
    if flags.nproc_per_node.is_some() {
        return Err(UserError::usage(format!(
            "envgen run {}: --nproc-per-node is for your own command (it starts torchrun)",
            flags.experiment
        ))
        .with_fix("the bundled experiments spread over processes with --ranks N; for your code: envgen run --nproc-per-node N -- python train.py")
        .into());
    }
    if flags.tensorboard_dir.is_some() {
        return Err(UserError::usage(format!(
            "envgen run {}: --tensorboard-dir is for your own command's event files",
            flags.experiment
        ))
        .with_fix("the bundled experiments write TensorBoard event files into their run directory by themselves; drop --tensorboard-dir")
        .into());
    }
    if flags.experiment.is_empty() {
        return Err(UserError::usage("envgen run: no experiment and no command given")
            .with_fix("envgen run EXPERIMENT (see `envgen experiments list`), or envgen run [flags] -- CMD ARGS… for your own code")
            .into());
    }
    find_bundled(&flags.experiment)
}

/// The bundled experiment called `name`; a usage error with a did-you-mean
/// (`envgen run gtp2` → gpt2) and the list otherwise.
pub fn find_bundled(name: &str) -> Result<&'static dyn Experiment> {
    if let Ok(found) = registry::find(name) {
        return Ok(found);
    }
    let names: Vec<&str> = registry::all().iter().map(|e| e.name()).collect();
    let hint = crate::suggest::did_you_mean(name, names.iter().copied())
        .map(|d| format!("{d} "))
        .unwrap_or_default();
    Err(UserError::usage(format!("unknown experiment `{name}`"))
        .with_fix(format!(
            "{hint}the experiments are {} (`envgen experiments list`); your own command goes after `--`",
            names.join(", ")
        ))
        .into())
}

/// The experiment called `name`, `command` included (for readers of run
/// directories: `runs list`'s headline metric).
pub fn experiment_named(name: &str) -> Option<&'static dyn Experiment> {
    if name == NAME {
        return Some(&USER_COMMAND);
    }
    registry::find(name).ok()
}

/// Refuse what a command run cannot do (yet), before anything is made.
pub fn check_flags(flags: &RunFlags) -> Result<()> {
    if flags.launched {
        // The launcher's own flags (`plan::job_args`), not the user's.
        return Ok(());
    }
    let l = &flags.launch;
    let first = flags.command.first().map(|p| Path::new(p).file_name());
    if flags.nproc_per_node.is_some() && first == Some(Some(std::ffi::OsStr::new("torchrun"))) {
        return Err(UserError::usage(
            "--nproc-per-node starts torchrun itself: the command after `--` is what each process runs",
        )
        .with_fix("give the script: envgen run --nproc-per-node 4 -- python train.py (or drop --nproc-per-node and keep your torchrun line)")
        .into());
    }
    let refused: Vec<&str> = [
        ("--micro-batch", flags.micro_batch.is_some()),
        ("--gen-batch", flags.gen_batch.is_some()),
        ("--precision", flags.precision.is_some()),
        ("--threads", flags.threads.is_some()),
        ("--profile", flags.profile.is_some()),
        ("--backend", flags.backend != BackendChoice::Auto),
        ("--stop-after", flags.stop_after.is_some()),
        // Node ranks of torchrun (below), not envgen's data-parallel ranks.
        (
            "--ranks",
            l.ranks.is_some() && flags.nproc_per_node.is_none(),
        ),
        (
            "--nodes",
            l.nodes.is_some() && flags.nproc_per_node.is_none(),
        ),
        ("--devices", !l.devices.is_empty()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    if !refused.is_empty() {
        return Err(UserError::usage(format!(
            "{} {} the bundled experiments' knobs: your command chooses its own batch, precision, threads and devices",
            refused.join(", "),
            if refused.len() == 1 { "is one of" } else { "are" }
        ))
        .with_fix("drop them and pass the equivalent to your command after `--` (e.g. CUDA_VISIBLE_DEVICES=0 envgen run -- python train.py --bf16)")
        .into());
    }
    Ok(())
}

/// The command of a new command run: from `-- CMD` (in the current
/// directory), or from the run `--from-run` names (its argv and workdir;
/// a warning when the code there is no longer what it ran).
pub fn spec(flags: &RunFlags) -> Result<Option<CommandSpec>> {
    let config = if !flags.command.is_empty() {
        let workdir = std::env::current_dir().map_err(|e| {
            UserError::environment(format!("cannot read the current directory: {e}"))
                .with_fix("cd into an existing directory")
        })?;
        CommandConfig {
            command: CommandLine {
                argv: flags.command.clone(),
                workdir,
                nproc_per_node: flags.nproc_per_node,
                tensorboard_dir: flags.tensorboard_dir.clone(),
            },
        }
    } else if let (Some(source), true) = (&flags.from_run, flags.experiment == NAME) {
        let text = std::fs::read_to_string(source.join("config.toml")).map_err(|e| {
            UserError::usage(format!(
                "{}: cannot read config.toml: {e}",
                source.display()
            ))
            .with_fix("give a run directory written by `envgen run -- CMD`")
        })?;
        parse_config(&text, &source.join("config.toml").display().to_string())?
    } else {
        return Ok(None);
    };
    let line = &config.command;
    let (record, diff) = command_record::capture(
        &line.argv,
        &line.workdir,
        // vars_os: a variable that is not UTF-8 must not panic (vars() would).
        std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }),
    );
    if let Some(source) = &flags.from_run {
        warn_if_code_changed(source, &record);
    }
    Ok(Some(CommandSpec {
        config,
        record,
        diff,
    }))
}

/// `envgen rerun` of a command run: say when the commit or the uncommitted
/// diff is not what the run had (the command runs anyway: it is the user's
/// code to change).
fn warn_if_code_changed(source: &Path, now: &CommandRecord) {
    let Some(then) = manifest::read(source)
        .ok()
        .and_then(|m| m.environment.command)
    else {
        return;
    };
    let (a, b) = (then.git.as_ref(), now.git.as_ref());
    let commit = |g: Option<&command_record::GitRecord>| g.and_then(|g| g.commit.clone());
    let diff = |g: Option<&command_record::GitRecord>| g.and_then(|g| g.diff_hash.clone());
    if commit(a) != commit(b) {
        eprintln!(
            "envgen: warning: {} ran at commit {}, the repository is at {} now",
            source.display(),
            commit(a).unwrap_or_else(|| "-".into()),
            commit(b).unwrap_or_else(|| "-".into())
        );
    }
    if diff(a) != diff(b) {
        eprintln!(
            "envgen: warning: the uncommitted changes differ from {}'s (diff_hash {} then, {} now; its diff is {})",
            source.display(),
            diff(a).unwrap_or_else(|| "none".into()),
            diff(b).unwrap_or_else(|| "none".into()),
            source.join(DIFF_FILE).display()
        );
    }
}

/// The knobs of a command run: none of envgen's apply, so every one is `-`
/// (the command picks its own batch, precision and devices).
pub fn knobs() -> HardwareKnobs {
    HardwareKnobs {
        name: None,
        micro_batch: 1,
        gen_batch: None,
        grad_accum: 1,
        precision: "-".into(),
        backend: "-".into(),
        device: "-".into(),
        threads: None,
    }
}

/// The prefix of a sweep key that names an environment variable.
pub const SWEEP_ENV: &str = "ENV:";

/// A command with sweep values applied (issue #39): `ENV:NAME=v` runs it
/// under `env NAME=v` (recorded in its argv, so each run's `config_hash`
/// differs and the preflight still sees the Python behind `env`); `KEY=v`
/// fills `{KEY}` in its arguments, and a command without `{KEY}` is refused.
pub fn with_sweep_values(config: &CommandConfig, values: &[String]) -> Result<CommandConfig> {
    let mut config = config.clone();
    for assignment in values {
        let (key, value) = assignment.split_once('=').unwrap_or((assignment, ""));
        let argv = &mut config.command.argv;
        if let Some(name) = key.strip_prefix(SWEEP_ENV) {
            argv.splice(0..0, ["env".to_string(), format!("{name}={value}")]);
            continue;
        }
        let slot = format!("{{{key}}}");
        if !argv.iter().any(|w| w.contains(&slot)) {
            return Err(UserError::usage(format!(
                "--sweep {key}=…: the command has no {slot} to fill"
            ))
            .with_fix(format!(
                "write {slot} where the value goes (envgen run --where slurm --sweep {key}=1e-3,3e-4 -- python train.py --lr {slot}), or sweep a variable: --sweep ENV:NAME=a,b"
            ))
            .into());
        }
        for word in argv.iter_mut() {
            *word = word.replace(&slot, value);
        }
    }
    Ok(config)
}

fn parse_config(text: &str, origin: &str) -> Result<CommandConfig> {
    let value: toml::Value = toml::from_str(text).map_err(|e| {
        UserError::usage(format!("{origin}: {e}"))
            .with_fix("restore the config.toml `envgen run -- CMD` wrote")
    })?;
    let config: CommandConfig = typed(&value, origin)?;
    if config.command.argv.is_empty() {
        return Err(
            UserError::usage(format!("{origin}: [command].argv is empty"))
                .with_fix("restore the config.toml `envgen run -- CMD` wrote")
                .into(),
        );
    }
    Ok(config)
}

fn resolved_config(config: &CommandConfig) -> Result<ResolvedConfig> {
    Ok(ResolvedConfig {
        preset: None,
        science: toml::Value::try_from(config)?,
        batch_size: 1,
        hardware: HardwareHint::default(),
        parameters: None,
    })
}

/// The user command as an [`Experiment`].
pub struct UserCommand;

pub static USER_COMMAND: UserCommand = UserCommand;

impl Experiment for UserCommand {
    fn name(&self) -> &'static str {
        NAME
    }
    fn description(&self) -> &'static str {
        "your own command (envgen run -- CMD ARGS…)"
    }
    fn presets(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    fn default_preset(&self) -> &'static str {
        ""
    }
    fn headline_metric(&self) -> &'static str {
        "loss"
    }
    fn resolve(
        &self,
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> anyhow::Result<ResolvedConfig> {
        if !overrides.is_empty() {
            return Err(UserError::usage("--set does not apply to a command run")
                .with_fix("pass your command's own options after `--`")
                .into());
        }
        resolved_config(&parse_config(text, origin)?)
    }
    fn run(
        &self,
        science: &toml::Value,
        control: &RunControl,
        _backend: backend::Resolved,
    ) -> anyhow::Result<Summary> {
        let config: CommandConfig = typed(science, "config.toml")?;
        super::command_exec::run(&config.command, control)
    }
    fn summary_line(&self, summary: &Summary) -> String {
        let m = &summary.metrics;
        let ending = match (m.get("exit_code"), m.get("signal")) {
            (_, Some(Value::String(signal))) => format!("killed by {signal}"),
            (Some(code), _) => format!("exit code {code}"),
            _ => "no exit code".into(),
        };
        let status = match summary.status {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
            Status::Running => "running",
        };
        let mut line = format!("command {status}: {ending}, {:.1} s", summary.wall_s);
        if let Some(loss) = m.get("loss").and_then(Value::as_f64) {
            line.push_str(&format!(", last loss {loss:.4}"));
        }
        line
    }
    /// Its processes meet through torchrun: `--nodes M` (or `--ranks M`
    /// here) with `--nproc-per-node` gives torchrun M node ranks.
    fn data_parallel(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(argv: &[&str]) -> CommandConfig {
        CommandConfig {
            command: CommandLine {
                argv: argv.iter().map(|w| w.to_string()).collect(),
                workdir: "/w".into(),
                nproc_per_node: None,
                tensorboard_dir: None,
            },
        }
    }

    /// Issue #39: `--sweep` over a command's variables and arguments.
    #[test]
    fn sweep_values_set_a_variable_or_fill_an_argument() {
        let base = config(&["python", "train.py", "--lr", "{lr}", "--out=ckpt-{lr}"]);
        let swept = |values: &[&str]| {
            let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            with_sweep_values(&base, &values).map(|c| c.command.argv)
        };
        assert_eq!(
            swept(&["lr=3e-4"]).unwrap(),
            ["python", "train.py", "--lr", "3e-4", "--out=ckpt-3e-4"]
        );
        assert_eq!(
            swept(&["ENV:MICRO_BATCH_SIZE=16"]).unwrap(),
            [
                "env",
                "MICRO_BATCH_SIZE=16",
                "python",
                "train.py",
                "--lr",
                "{lr}",
                "--out=ckpt-{lr}"
            ]
        );
        let err = swept(&["bs=4"]).unwrap_err().to_string();
        assert!(err.contains("the command has no {bs} to fill"), "{err}");
        // Each value is its own config: the hashes differ.
        let hash = |values: &[&str]| {
            let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            let spec = CommandSpec {
                config: base.clone(),
                record: command_record::capture(&[], Path::new("/"), []).0,
                diff: None,
            };
            spec.resolved(&values).unwrap().config_hash().unwrap()
        };
        assert_ne!(hash(&["lr=1"]), hash(&["lr=2"]));
        assert_eq!(hash(&["lr=1"]), hash(&["lr=1"]));
    }
}
