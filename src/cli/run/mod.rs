//! `envgen run EXP`: the flags, checked into a [`RunRequest`] (every
//! refusal before anything is made), handed to `launch::run` (or to the
//! dry-run planner), and what came back printed. Where and how a run goes
//! is `launch`'s; this file only parses and prints.

use std::path::{Path, PathBuf};

use envgen_experiments::backend::BackendChoice;
use envgen_experiments::engine::Status;
use envgen_experiments::registry::Experiment;
use serde_json::json;

use crate::error::Result;
use crate::image::daemon::options::{parse_size, ContainerOptions, Ipc, Network};
use crate::launch::request::{Container, LaunchFlags, RunFlags, Where};
use crate::launch::{self, Launched, RunOutcome, RunRequest};
use crate::profiles::Precision;

mod dry_run;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// gpt2, hrm-sudoku, rft or quantize (or your own command after `--`).
    pub experiment: Option<String>,
    /// Your own command, run in this directory without a shell: `envgen run
    /// [flags] -- python train.py --lr 3e-4` (recorded with its git state).
    #[arg(
        last = true,
        value_name = "CMD ARGS",
        conflicts_with_all = ["experiment", "preset", "config", "overrides", "resume", "from_run"]
    )]
    pub command: Vec<String>,
    /// The experiment's science config by name (`envgen experiments
    /// describe EXP` lists them; default: the experiment's default preset).
    #[arg(long, conflicts_with = "config", help_heading = "Science")]
    pub preset: Option<String>,
    /// A science config file (TOML) instead of a preset.
    #[arg(long, value_name = "FILE", help_heading = "Science")]
    pub config: Option<PathBuf>,
    /// Override one config key, e.g. --set optim.lr=3e-4; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE", help_heading = "Science")]
    pub overrides: Vec<String>,
    /// Continue an interrupted run from its last checkpoint (from step 0
    /// when it has none yet); with --where slurm|docker, launch it again.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["preset", "config", "overrides", "sweep"], help_heading = "Science")]
    pub resume: Option<PathBuf>,
    /// One run per value of a config key, as a Slurm job array, e.g.
    /// --sweep train.seed=1,2,3 (needs --where slurm). Your command: a
    /// variable (--sweep ENV:MICRO_BATCH_SIZE=4,16) or {KEY} in its arguments.
    #[arg(long, value_name = "KEY=V1,V2,…", help_heading = "Science")]
    pub sweep: Option<String>,
    /// Your command as N processes under torchrun (PyTorch's launcher:
    /// RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT set for each), e.g.
    /// `--nproc-per-node 4 -- python train.py`.
    #[arg(long, help_heading = "Your command", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nproc_per_node: Option<u32>,
    /// Your command's TensorBoard directory (relative to where it runs):
    /// the scalars it logged there become the run's metrics when it ends.
    #[arg(long, help_heading = "Your command", value_name = "DIR")]
    pub tensorboard_dir: Option<PathBuf>,
    /// What the tensors run on: `auto` is CUDA when compiled in and the
    /// GPU is usable, else the CPU (Burn's flex backend).
    #[arg(long, value_enum, default_value = "auto", help_heading = "Hardware")]
    pub backend: Backend,
    /// Rows per forward/backward pass (a hardware knob: gradient accumulation
    /// keeps the global batch, hence the science, unchanged).
    #[arg(long, help_heading = "Hardware", value_name = "N", value_parser = at_least_one)]
    pub micro_batch: Option<usize>,
    /// Rows (completions) per generation call of an experiment that
    /// samples (rft): a hardware knob like --micro-batch, recorded in the
    /// manifest's profile; the samples do not depend on it (default: the
    /// hardware profile's, then the preset's `[hardware] gen_batch`, else 64).
    #[arg(long, help_heading = "Hardware", value_name = "N", value_parser = at_least_one)]
    pub gen_batch: Option<usize>,
    /// CPU threads for tensor work (a hardware knob, recorded in the
    /// manifest; default: every core this process may use).
    #[arg(long, help_heading = "Hardware", value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// What the arithmetic runs in (a hardware knob, recorded in the
    /// manifest; default: the hardware profile's). bf16/fp16: mixed
    /// precision with f32 master weights; fp16 adds loss scaling.
    #[arg(long, value_enum, help_heading = "Hardware")]
    pub precision: Option<PrecisionArg>,
    /// Hardware profile from env/profiles.toml (default: chosen from the host's GPU).
    #[arg(long, value_name = "NAME", help_heading = "Hardware")]
    pub profile: Option<String>,
    /// Where the run trains: on this machine, in a Docker container, as a
    /// Slurm job, or `auto` (Slurm if the cluster answers, else Docker if
    /// its daemon answers, else native).
    #[arg(
        long = "where",
        value_enum,
        default_value = "native",
        help_heading = "Where"
    )]
    pub location: Where,
    /// Slurm: submit the job (or array) and return without following it.
    #[arg(long, help_heading = "Slurm")]
    pub detach: bool,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Parent directory of run directories.
    #[arg(
        long,
        value_name = "DIR",
        env = "ENVGEN_RUNS_DIR",
        default_value = "runs",
        help_heading = "Output"
    )]
    pub out: PathBuf,
    /// Test hook: stop (checkpoint, status interrupted, exit 130) after N steps.
    #[arg(long, value_name = "N", hide = true)]
    pub stop_after: Option<u64>,
    /// Set by launchers: this process runs in a Slurm job or a container,
    /// in the run directory given with --resume that the launcher prepared.
    #[arg(long, hide = true, requires = "resume")]
    pub launched: bool,
    /// Re-create the run in RUN_DIR (its config.toml and preset): `envgen rerun`.
    #[arg(long, value_name = "RUN_DIR", hide = true, conflicts_with_all = ["preset", "config", "overrides", "resume", "sweep"])]
    pub from_run: Option<PathBuf>,
    /// Check every flag, the config, the hardware profile and the data
    /// files as the run would, print the plan and exit: no run directory,
    /// no image, no data, no GPU.
    #[arg(long, conflicts_with = "launched", help_heading = "Output")]
    pub dry_run: bool,
    /// Print the outcome (or with --dry-run the plan) as one JSON document
    /// on stdout, and no progress bar.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// Where-specific flags: the image, the Slurm resources and runtime, GPUs.
/// They are recorded in the manifest (`launch_args`) so `envgen rerun`
/// launches the same way.
#[derive(Debug, Clone, clap::Args)]
pub struct LaunchArgs {
    /// Slurm: run envgen natively on the node (default) or in a container.
    #[arg(long, value_enum, default_value = "none", help_heading = "Slurm")]
    pub container: Container,
    /// Slurm partition to submit to (sbatch --partition; default: the cluster's).
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    pub partition: Option<String>,
    /// Slurm account to charge (sbatch --account; default: yours).
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    pub account: Option<String>,
    /// Slurm time limit, e.g. 01:00:00.
    #[arg(long, value_name = "LIMIT", help_heading = "Slurm")]
    pub time: Option<String>,
    /// Slurm: nodes to train on (data-parallel across them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Slurm")]
    pub nodes: Option<u32>,
    /// Slurm: GPUs per node; with a GPU backend, one rank per GPU.
    #[arg(long, value_name = "N", help_heading = "Slurm")]
    pub gpus_per_node: Option<u32>,
    /// Slurm: CPUs per task (0 is refused, not silently made 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Slurm")]
    pub cpus_per_task: Option<u32>,
    /// Slurm memory per node, e.g. 32G.
    #[arg(long, value_name = "SIZE", help_heading = "Slurm")]
    pub mem: Option<String>,
    /// Slurm quality of service (sbatch --qos; default: your association's).
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    pub qos: Option<String>,
    /// Slurm generic resources per node, e.g. gpu:a30:1 (sbatch --gres):
    /// written instead of --gpus-per-node; its GPU count plans the ranks.
    #[arg(long, value_name = "SPEC", help_heading = "Slurm")]
    pub gres: Option<String>,
    /// Slurm node features the job needs, e.g. 'a100&ib' (sbatch --constraint).
    #[arg(long, value_name = "FEATURES", help_heading = "Slurm")]
    pub constraint: Option<String>,
    /// Slurm job name (default: envgen-EXPERIMENT).
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    pub job_name: Option<String>,
    /// Any other sbatch option, as its own #SBATCH line, e.g.
    /// --sbatch-arg=--mail-type=END; repeatable. Options envgen writes
    /// itself (--partition, --output, …) are refused, naming their flag.
    #[arg(
        long,
        value_name = "--OPTION[=VALUE]",
        allow_hyphen_values = true,
        help_heading = "Slurm"
    )]
    pub sbatch_arg: Vec<String>,
    /// Data-parallel ranks (processes) in all: natively on this machine, or
    /// as Slurm tasks spread over --nodes. The global batch is split over
    /// them; the science stays the same.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Hardware")]
    pub ranks: Option<u32>,
    /// Native: the GPU of each rank, e.g. --ranks 2 --devices 0,1.
    #[arg(
        long,
        value_name = "ID,…",
        value_delimiter = ',',
        help_heading = "Hardware"
    )]
    pub devices: Vec<String>,
    /// Docker: the image to run (default: the profile image for the backend,
    /// built on demand). Slurm: with --container, the charliecloud image
    /// directory, the Apptainer SIF, or the pyxis image reference.
    #[arg(
        long,
        value_name = "REF|PATH",
        env = "ENVGEN_RUN_IMAGE",
        help_heading = "Docker"
    )]
    pub image: Option<String>,
    /// Docker: GPUs for the container: all, a count, or device IDs (0,2 or UUIDs).
    #[arg(long, value_name = "all|N|ID,…", help_heading = "Docker")]
    pub gpus: Option<String>,
    /// Docker: request GPUs as CDI devices (nvidia.com/gpu=…).
    #[arg(long, help_heading = "Docker")]
    pub cdi: bool,
    /// Docker: the container's network: none (the default), bridge (outbound
    /// access, e.g. wandb), host, or a Docker network's name.
    #[arg(long, value_name = "none|bridge|host|NAME", default_value = "none", value_parser = Network::parse, help_heading = "Docker")]
    pub network: Network,
    /// Docker: the IPC namespace; host shares the host's /dev/shm (what
    /// NGC's images ask for, for DataLoader workers).
    #[arg(long, value_enum, default_value = "private", help_heading = "Docker")]
    pub ipc: Ipc,
    /// Docker: the size of /dev/shm, e.g. 2g (default: Docker's 64 MiB).
    #[arg(long, value_name = "SIZE", value_parser = |s: &str| parse_size("--shm-size", s), help_heading = "Docker")]
    pub shm_size: Option<i64>,
    /// Docker: the size of the tmpfs that is HOME and /tmp (caches such as
    /// torch inductor's land there), e.g. 8g.
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = |s: &str| parse_size("--home-size", s), help_heading = "Docker")]
    pub home_size: i64,
    /// Docker: mount your command's code read-write at /workspace (default
    /// read-only), for code that writes beside itself (`checkpoints/`).
    #[arg(long, help_heading = "Docker")]
    pub writable_workspace: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    Fp32,
    Tf32,
    Bf16,
    Fp16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Tf32 => Precision::Tf32,
            PrecisionArg::Bf16 => Precision::Bf16,
            PrecisionArg::Fp16 => Precision::Fp16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    Cpu,
    Cuda,
}

impl From<Backend> for BackendChoice {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Auto => BackendChoice::Auto,
            Backend::Cpu => BackendChoice::Cpu,
            Backend::Cuda => BackendChoice::Cuda,
        }
    }
}

impl Args {
    /// The flags as plain values, for `launch::request()`.
    fn flags(self) -> RunFlags {
        let l = self.launch;
        let experiment = match (self.experiment, self.command.is_empty()) {
            (Some(name), _) => name,
            (None, false) => launch::command::NAME.to_string(),
            // Refused with its fix by launch::request.
            (None, true) => String::new(),
        };
        RunFlags {
            experiment,
            command: self.command,
            nproc_per_node: self.nproc_per_node,
            tensorboard_dir: self.tensorboard_dir,
            preset: self.preset,
            config: self.config,
            overrides: self.overrides,
            place: self.location,
            backend: self.backend.into(),
            micro_batch: self.micro_batch,
            gen_batch: self.gen_batch,
            threads: self.threads,
            precision: self.precision.map(Precision::from),
            profile: self.profile,
            out: self.out,
            resume: self.resume,
            sweep: self.sweep,
            detach: self.detach,
            launch: LaunchFlags {
                image: l.image,
                container: l.container,
                partition: l.partition,
                account: l.account,
                time: l.time,
                nodes: l.nodes,
                gpus_per_node: l.gpus_per_node,
                ranks: l.ranks,
                devices: l.devices,
                cpus_per_task: l.cpus_per_task,
                mem: l.mem,
                qos: l.qos,
                gres: l.gres,
                constraint: l.constraint,
                job_name: l.job_name,
                sbatch_args: l.sbatch_arg,
                gpus: l.gpus,
                cdi: l.cdi,
                docker: ContainerOptions {
                    network: l.network,
                    ipc: l.ipc,
                    shm_size_bytes: l.shm_size,
                    home_size_bytes: l.home_size,
                    writable_workspace: l.writable_workspace,
                },
            },
            stop_after: self.stop_after,
            launched: self.launched,
            from_run: self.from_run,
            progress: !self.json,
        }
    }
}

pub fn execute(args: Args) -> Result<i32> {
    let (dry_run, as_json) = (args.dry_run, args.json);
    let request = launch::request(args.flags())?;
    if let (true, Some(spec)) = (dry_run, &request.command) {
        let mut plan = launch::dry_run::of_command(&request, spec);
        if request.decision.place.is_cluster_job() {
            plan["sbatch_script"] = launch::slurm::planned_script(&request, &[])?.into();
        }
        if as_json {
            crate::output::outln!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            dry_run::print_command_plan(&plan);
        }
        return Ok(0);
    }
    if dry_run {
        let plan = launch::dry_run::plan(&request)?;
        if as_json {
            crate::output::outln!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            dry_run::print_plan(&plan);
        }
        return Ok(0);
    }
    match launch::run(&request)? {
        Launched::Ended(outcomes) => {
            print_outcomes(request.experiment, &outcomes, as_json)?;
            for outcome in &outcomes {
                if outcome.summary.status == Status::Interrupted {
                    eprintln!(
                        "envgen: {} was interrupted; continue it with: {}",
                        outcome.run_dir.display(),
                        resume_command(&request, &outcome.run_dir)
                    );
                }
            }
            Ok(launch::exit_code(&outcomes))
        }
        Launched::RankEnded(outcomes) => Ok(launch::exit_code(&outcomes)),
        Launched::Detached { job, runs } => {
            if as_json {
                crate::output::outln!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "job_id": job, "run_dirs": runs }))?
                );
            } else {
                for run in &runs {
                    crate::output::outln!("run directory: {}", run.display());
                }
                crate::output::outln!(
                    "follow with `envgen runs watch RUN`, stop with `envgen runs cancel RUN`"
                );
            }
            Ok(0)
        }
    }
}

fn print_outcomes(
    experiment: &dyn Experiment,
    outcomes: &[RunOutcome],
    as_json: bool,
) -> Result<()> {
    if as_json {
        let doc = match outcomes {
            [one] => json!({ "run_dir": one.run_dir, "summary": one.summary }),
            many => {
                json!({ "runs": many.iter().map(|o| json!({ "run_dir": o.run_dir, "summary": o.summary })).collect::<Vec<_>>() })
            }
        };
        crate::output::outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    for outcome in outcomes {
        crate::output::outln!("{}", experiment.summary_line(&outcome.summary));
        crate::output::outln!("run directory: {}", outcome.run_dir.display());
    }
    Ok(())
}

/// The command that continues `run_dir` after an interruption: `envgen
/// run --resume ID` (the experiment and config are the run's own), with
/// `--out` when the run is not under `runs`, and the place, backend and
/// launch flags it was started with when they were not the defaults.
fn resume_command(request: &RunRequest, run_dir: &Path) -> String {
    let quote =
        |word: &str| shlex::try_quote(word).map_or_else(|_| word.into(), |q| q.into_owned());
    let id = run_dir.file_name().map_or_else(
        || run_dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut words = vec!["envgen run --resume".to_string(), quote(&id)];
    let parent = run_dir.parent().unwrap_or(Path::new(""));
    if parent != Path::new("runs") {
        words.extend(["--out".into(), quote(&parent.display().to_string())]);
    }
    if !request.decision.place.is_this_machine() {
        words.extend(["--where".into(), request.decision.place.name().into()]);
    }
    if request.flags.backend != BackendChoice::Auto && !request.is_command() {
        words.extend(["--backend".into(), request.backend_name().into()]);
    }
    let launch = request.flags.launch.words();
    words.extend(launch.iter().map(|w| quote(w)));
    words.join(" ")
}

/// A count that must be 1 or more (`--micro-batch 0` would be replaced
/// silently further down).
pub fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The experiment called `name` (usage error listing the known ones otherwise).
pub fn find_experiment(name: &str) -> Result<&'static dyn Experiment> {
    launch::command::find_bundled(name)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn launch_words(argv: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(["envgen", "run", "gpt2"].iter().chain(argv)).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        args.flags().launch.words()
    }

    /// The Slurm flags of issue #39 are recorded (`launch_args`) as words
    /// that parse back to themselves, so `rerun` submits the same job; a
    /// raw option starting with `--` is one `--sbatch-arg=…` word.
    #[test]
    fn slurm_flags_are_recorded_for_rerun_and_parse_back() {
        let words = launch_words(&[
            "--qos",
            "high",
            "--gres",
            "gpu:a30:1",
            "--constraint",
            "a100&ib",
            "--job-name",
            "mine",
            "--sbatch-arg",
            "--mail-type=END",
            "--sbatch-arg=--exclusive",
        ]);
        for pair in [
            ["--qos", "high"],
            ["--gres", "gpu:a30:1"],
            ["--constraint", "a100&ib"],
            ["--job-name", "mine"],
        ] {
            assert!(words.windows(2).any(|w| w == pair), "{pair:?}: {words:?}");
        }
        assert!(words.contains(&"--sbatch-arg=--mail-type=END".to_string()));
        assert!(words.contains(&"--sbatch-arg=--exclusive".to_string()));
        let again: Vec<&str> = words.iter().map(String::as_str).collect();
        assert_eq!(launch_words(&again), words);
    }
}
