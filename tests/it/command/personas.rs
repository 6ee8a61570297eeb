//! Issue #39's five researchers, each with the one command docs/running.md
//! ("Five researchers, one command each") gives for the step they missed,
//! run as a plain user would: an unprivileged uid, a 0700 home, a git
//! repository of their own, envgen from `PATH`, logs read from files.
//! Nothing here needs a service: the Slurm and Docker steps are the
//! `--dry-run`s that show what would be submitted or started.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{is_root, set_mode, text};
use crate::train::gpt2_data_cli::write_npy;

/// The uid the researchers run as (no passwd entry is needed).
const RESEARCHER: u32 = 4343;

/// A researcher's shell: `sh -c LINE` as uid 4343 in `home` (0700, theirs),
/// with `bin` (holding a copy of envgen) first on `PATH`.
struct Researcher {
    home: PathBuf,
    bin: PathBuf,
}

impl Researcher {
    fn sh(&self, line: &str) -> Output {
        Command::new("setpriv")
            .arg(format!("--reuid={RESEARCHER}"))
            .arg(format!("--regid={RESEARCHER}"))
            .arg("--clear-groups")
            .args(["sh", "-c", line])
            .current_dir(&self.home)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("LANG", "C.UTF-8")
            .output()
            .expect("setpriv runs")
    }

    fn sh_ok(&self, line: &str) -> String {
        let out = self.sh(line);
        assert!(out.status.success(), "`{line}` failed:\n{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The run directories under `~/runs`, oldest first (names sort by time).
    fn runs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(self.home.join("runs"))
            .map(|entries| entries.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        dirs.retain(|d| d.is_dir());
        dirs.sort();
        dirs
    }

    fn manifest(&self, run: &Path) -> Value {
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap()
    }
}

/// A 0755 folder holding a 0755 copy of this build's envgen, and a 0700
/// home owned by the researcher with a git repository and a `train.py`.
fn researcher(root: &Path) -> Researcher {
    set_mode(root, 0o755);
    let bin = root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_envgen"), bin.join("envgen")).unwrap();
    set_mode(&bin.join("envgen"), 0o755);
    let home = root.join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(RESEARCHER), Some(RESEARCHER)).unwrap();
    set_mode(&home, 0o700);
    let researcher = Researcher { home, bin };
    researcher.sh_ok("git init -q . && printf 'print(\"step 1 loss 2.5\")\\n' > train.py");
    researcher
}

#[test]
fn each_researchers_missing_step_is_one_command_as_a_plain_user() {
    assert!(
        is_root(),
        "the test switches to an unprivileged uid with setpriv (the suite runs as root)"
    );
    let root = tempfile::tempdir().unwrap();
    let me = researcher(root.path());

    // 1. The Slurm student with A30s and a hand-written sbatch: the job
    // script envgen would submit, with their QoS and typed GPU, and CPUs
    // for the data loader.
    let script = me.sh_ok(
        "envgen run --where slurm --partition gpu --qos normal --gres gpu:a30:1 \
         --dry-run -- python3 train.py",
    );
    for line in [
        "#SBATCH --qos=normal",
        "#SBATCH --gres=gpu:a30:1",
        "#SBATCH --cpus-per-task=8",
    ] {
        assert!(script.contains(line), "no `{line}` in:\n{script}");
    }
    assert!(me.runs().is_empty(), "a dry run made a run directory");

    // 2. The RFT student tuning MICRO_BATCH_SIZE by environment: both
    // runs record it, and compare names it instead of "same config".
    me.sh_ok("MICRO_BATCH_SIZE=4 envgen run -q -- python3 train.py");
    me.sh_ok("MICRO_BATCH_SIZE=16 envgen run -q -- python3 train.py");
    let runs = me.runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let compare = me.sh_ok(&format!(
        "envgen runs compare {} {}",
        runs[0].display(),
        runs[1].display()
    ));
    assert!(
        compare.contains("command.env.MICRO_BATCH_SIZE  4 → 16"),
        "{compare}"
    );
    // Their repository does not see the runs folder (its .gitignore), so
    // the second run lists nothing of the first as untracked.
    let status = me.sh_ok("git status --porcelain");
    assert_eq!(status.trim(), "?? train.py", "git status shows the runs");
    let untracked = &me.manifest(&runs[1])["command"]["git"]["untracked"];
    assert_eq!(untracked, &serde_json::json!(["train.py"]));

    // 3. The build-nanogpt user with a folder of `.npy` shards: the dry run
    // names the source to set, and passes with it.
    let shards = me.home.join("edu_fineweb10B");
    std::fs::create_dir(&shards).unwrap();
    write_npy(&shards.join("edufineweb_val_000000.npy"), 0, 5_000);
    write_npy(&shards.join("edufineweb_train_000001.npy"), 5_000, 20_000);
    for shard in std::fs::read_dir(&shards).unwrap() {
        std::os::unix::fs::chown(shard.unwrap().path(), Some(RESEARCHER), None).unwrap();
    }
    let gpt2 = "envgen run gpt2 --preset gpt2-124m --set data.path=edu_fineweb10B --dry-run";
    let refused = me.sh(gpt2);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--set data.source=npy"), "{stderr}");
    me.sh_ok(&format!("{gpt2} --set data.source=npy"));
    assert_eq!(me.runs().len(), 2, "a refused config left a run directory");

    // 4. The HRM user in an NGC container, logging to W&B: the network,
    // the host's IPC and a writable checkout, each said before it starts.
    let docker = me.sh_ok(
        "envgen run --where docker --image nvcr.io/nvidia/pytorch:25.06-py3 \
         --network bridge --ipc host --writable-workspace --dry-run -- python3 train.py",
    );
    for said in [
        "network bridge",
        "ipc host",
        "mounted writable at /workspace",
    ] {
        assert!(docker.contains(said), "no `{said}` in:\n{docker}");
    }

    // 5. The precision team flipping TF32: the flag is in the run's record,
    // and a `-v` log written to a file has no colour codes in it.
    me.sh_ok("NVIDIA_TF32_OVERRIDE=0 envgen -v run -- python3 train.py 2> tf32.log");
    let run = me.runs().pop().unwrap();
    let env = &me.manifest(&run)["command"]["env"];
    assert_eq!(env["NVIDIA_TF32_OVERRIDE"], "0", "{env}");
    let log = std::fs::read_to_string(me.home.join("tf32.log")).unwrap();
    assert!(!log.is_empty() && !log.contains('\u{1b}'), "{log:?}");
}
