//! `manifest.json`, typed, and the one module that writes it: what a run is
//! (experiment, preset, `config_hash`), the hardware knobs it trained with
//! and where it ran (the [`Environment`]). Run directories are made by
//! `runs::out_dir`.
//! Every other module reads and changes a manifest through these types, so
//! a misspelt field is a compile error, not lost provenance.
//!
//! Files are versioned ([`MANIFEST_VERSION`]); a field this envgen does not
//! know is refused on read (it would be dropped on the next write), and
//! manifests written before the version field existed are read as version 1
//! and migrated (see [`migrate`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envgen_experiments::data::DataFile;
use envgen_experiments::engine::rundir::{self, now_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Result, UserError};
use crate::host::Host;
use crate::image::daemon::options::ContainerOptions;
pub use crate::runs::command_record::{CommandRecord, GitRecord};
pub use crate::runs::launch_flags::LaunchFlags;
pub use crate::runs::place::Place;

/// The manifest format this envgen writes. 1: no `manifest_version` field
/// (envgen before the typed manifest); 2: the same fields, versioned;
/// 3: `where` is a [`Place`] (the same words, now refused when unknown),
/// and the launch flags are recorded typed too (`launch`).
pub const MANIFEST_VERSION: u32 = 3;

pub const MANIFEST_FILE: &str = "manifest.json";

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(default = "version_one")]
    pub manifest_version: u32,
    pub run_id: String,
    pub experiment: String,
    pub preset: Option<String>,
    pub config_hash: String,
    pub profile: HardwareKnobs,
    pub started_at: String,
    pub finished_at: Option<String>,
    #[serde(flatten)]
    pub environment: Environment,
}

fn version_one() -> u32 {
    1
}

/// The manifest's `profile`: the hardware knobs the run trained with. They
/// change speed, never the science (`config_hash` does not cover them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareKnobs {
    /// The hardware profile (env/profiles.toml) these knobs came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub micro_batch: usize,
    /// Rows per generation call (`--gen-batch`, or the preset's
    /// `[hardware] gen_batch`) of an experiment that samples; absent when
    /// neither set it (the experiment's default) and in older manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen_batch: Option<usize>,
    pub grad_accum: usize,
    pub precision: String,
    pub backend: String,
    pub device: String,
    /// CPU threads for tensor work (the rayon pool) in the process that
    /// trains; absent in manifests written before envgen recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
}

/// Where and how the run ran: envgen's version, the place, the host, the
/// image, the job or container, the data files. Written at the top level of
/// `manifest.json`, beside the run's identity.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Environment {
    pub envgen_version: String,
    pub git_revision: Option<String>,
    /// The image the run's envgen ran in (null: natively).
    pub image: Option<ImageRecord>,
    /// Where it trains (`"native"`, `"docker"`, `"slurm"`).
    #[serde(rename = "where")]
    pub place: Place,
    /// Why there: `--where docker`, `--where auto: …`, `launched`.
    pub where_reason: String,
    /// The doctor's host snapshot of the machine that trains (the node's or
    /// the container's once the launched envgen starts).
    #[serde(default)]
    pub host: Host,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<usize>,
    /// Where-specific flags (`--image`, `--partition`, `--ranks`…) as
    /// words; what `envgen rerun` replays for a manifest without `launch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_args: Option<Vec<String>>,
    /// The same flags, typed (manifest_version 3): what `rerun` and the
    /// `--resume` command replay ([`Environment::launch_words`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<LaunchFlags>,
    /// The run directory this one re-creates (`envgen rerun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepRecord>,
    /// The data files the run read (from its summary, host paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_files: Option<Vec<DataFile>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<DistributedRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerRecord>,
    /// A user command's line, directory, git state and environment
    /// (`envgen run -- CMD`); absent for the bundled experiments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandRecord>,
    /// Fields this envgen does not know: refused by [`read`] (serde cannot
    /// combine `deny_unknown_fields` with `flatten`, so they land here).
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, Value>,
}

/// The image of a containerized run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ImageRecord {
    /// A Docker image, as the daemon knows it.
    Docker(DockerImage),
    /// A Slurm container runtime's image (charliecloud directory, SIF, pyxis reference).
    Cluster(ClusterImage),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerImage {
    /// The reference the run was started with (a tag, or an image ID).
    #[serde(rename = "ref")]
    pub reference: String,
    pub id: String,
    /// The registry's digest when the image has one, else the image ID.
    pub digest: String,
    pub repo_digest: Option<String>,
    /// The envgen binary inside, as the image's label records it (or the
    /// mounted one's, with `envgen_mounted`).
    pub envgen_binary_sha256: Option<String>,
    /// The image has no envgen (an NGC or CUDA image): the launching
    /// envgen was mounted read-only into the container to run the command.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub envgen_mounted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterImage {
    #[serde(rename = "ref")]
    pub reference: String,
    /// `charliecloud`, `apptainer` or `pyxis`.
    pub runtime: String,
    /// Charliecloud: the sha256 of the envgen binary in the directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_of: Option<String>,
}

impl ImageRecord {
    /// The image ID a Docker run ran as (what `rerun` starts again).
    pub fn docker_id(&self) -> Option<&str> {
        match self {
            ImageRecord::Docker(image) => Some(&image.id),
            ImageRecord::Cluster(_) => None,
        }
    }

    pub fn reference(&self) -> &str {
        match self {
            ImageRecord::Docker(image) => &image.reference,
            ImageRecord::Cluster(image) => &image.reference,
        }
    }
}

/// One value of a `--sweep`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepRecord {
    pub key: String,
    pub value: String,
    pub index: usize,
    pub of: usize,
}

/// How the ranks of a data-parallel run sat and reduced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistributedRecord {
    pub ranks_per_node: usize,
    pub nodes: Vec<String>,
    pub reduction: String,
    pub reduction_detail: String,
    pub rendezvous: String,
}

/// The Slurm job (or array task) the run was submitted as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmRecord {
    /// The job ID sbatch printed.
    pub job_id: String,
    /// The job, or `JOBID_INDEX` for an array task.
    pub job: String,
    pub script: String,
    pub output: String,
    /// The last state envgen saw.
    pub state: String,
    /// Jobs of earlier launches of this run (`--resume`).
    #[serde(default)]
    pub earlier_jobs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerRecord {
    pub container: String,
    /// The container's knobs (issue #39); absent in manifests written
    /// before them (which ran with the hardened defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<ContainerOptions>,
}

impl Environment {
    /// A new run's environment: this envgen, the place and why.
    pub fn new(place: Place, where_reason: &str, host: &Host) -> Environment {
        Environment {
            envgen_version: env!("CARGO_PKG_VERSION").into(),
            git_revision: option_env!("ENVGEN_GIT_REVISION").map(str::to_owned),
            image: None,
            place,
            where_reason: where_reason.into(),
            host: host.clone(),
            ..Default::default()
        }
    }
}

impl Environment {
    /// The run's where-specific flags as `envgen run` words: from the typed
    /// `launch` (version 3), else the words older manifests recorded.
    pub fn launch_words(&self) -> Vec<String> {
        match &self.launch {
            Some(flags) => flags.words(),
            None => self.launch_args.clone().unwrap_or_default(),
        }
    }
}

/// Bring a manifest of an older format up to [`MANIFEST_VERSION`].
/// Version 1 has the same fields without the version; version 2's `where`
/// is a string, which serde already read into a [`Place`] (the words did
/// not change; one that is no place is refused by [`read`], naming it).
/// So only the number changes; later formats add their steps here.
pub fn migrate(mut manifest: Manifest) -> Manifest {
    if manifest.manifest_version < MANIFEST_VERSION {
        manifest.manifest_version = MANIFEST_VERSION;
    }
    manifest
}

/// Read `dir/manifest.json`: refused (exit 2, naming the file and field)
/// when it is not a manifest, comes from a newer envgen, or has fields
/// this envgen does not know.
pub fn read(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let manifest: Manifest = rundir::read_json(&path)?;
    if manifest.manifest_version > MANIFEST_VERSION {
        return Err(UserError::usage(format!(
            "{}: manifest_version {} is newer than this envgen reads ({MANIFEST_VERSION})",
            path.display(),
            manifest.manifest_version
        ))
        .with_fix("use the envgen that wrote the run (its `envgen_version`), or a newer one")
        .into());
    }
    if let Some(field) = manifest.environment.unknown.keys().next() {
        return Err(UserError::usage(format!(
            "{}: unknown field `{field}` (a typo, or written by another envgen)",
            path.display()
        ))
        .with_fix("remove the field, or use the envgen that wrote the run")
        .into());
    }
    Ok(redact_command(migrate(manifest)))
}

/// A manifest written before secrets were redacted by pattern (issue #40)
/// may hold them in clear: whatever reads a manifest sees them redacted.
fn redact_command(mut manifest: Manifest) -> Manifest {
    if let Some(command) = &mut manifest.environment.command {
        command.env = crate::runs::redact::env(std::mem::take(&mut command.env));
        for word in &mut command.argv {
            *word = crate::runs::redact::userinfo(word);
        }
    }
    manifest
}

/// Write `dir/manifest.json` (atomically).
pub fn write(dir: &Path, manifest: &Manifest) -> Result<()> {
    rundir::write_json(&dir.join(MANIFEST_FILE), manifest)
}

/// Read, change and write back a run's manifest.
pub fn update(dir: &Path, change: impl FnOnce(&mut Manifest)) -> Result<()> {
    let mut manifest = read(dir)?;
    change(&mut manifest);
    write(dir, &manifest)
}

/// Stamp `finished_at` (a run that ended, whatever its status). A run
/// directory without a readable manifest is left as it is.
pub fn stamp_finished(dir: &Path) -> Result<()> {
    if dir.join(MANIFEST_FILE).is_file() {
        update(dir, |m| m.finished_at = Some(now_rfc3339()))?;
    }
    Ok(())
}

/// Move the summary of an earlier attempt (interrupted, failed) aside
/// before the run goes on: to `attempts/summary-N.json`, N counting from 1.
/// A stale summary must not describe a run that is going on again, and a
/// failed new attempt must not overwrite how the earlier one ended.
pub fn keep_attempt(dir: &Path) -> Result<()> {
    let summary = dir.join("summary.json");
    if !summary.is_file() {
        return Ok(());
    }
    let attempts = dir.join("attempts");
    std::fs::create_dir_all(&attempts).map_err(|e| {
        UserError::environment(format!("cannot create {}: {e}", attempts.display()))
    })?;
    for n in 1.. {
        let kept = attempts.join(format!("summary-{n}.json"));
        if !kept.exists() {
            std::fs::rename(&summary, &kept).map_err(|e| {
                UserError::environment(format!("cannot move {} aside: {e}", summary.display()))
            })?;
            return Ok(());
        }
    }
    unreachable!("the loop returns")
}

/// A complete manifest, for tests of its readers.
#[cfg(test)]
pub(crate) fn example() -> Manifest {
    let mut environment = Environment::new(Place::Docker, "--where docker", &Host::default());
    environment.world_size = Some(1);
    environment.image = Some(ImageRecord::Docker(DockerImage {
        reference: "envgen/cpu:x".into(),
        id: "sha256:abc".into(),
        digest: "sha256:abc".into(),
        repo_digest: None,
        envgen_binary_sha256: Some("0f".into()),
        envgen_mounted: false,
    }));
    environment.slurm = None;
    environment.docker = Some(DockerRecord {
        container: "envgen-x".into(),
        options: Some(ContainerOptions::default()),
    });
    Manifest {
        manifest_version: MANIFEST_VERSION,
        run_id: "gpt2-tiny-x".into(),
        experiment: "gpt2".into(),
        preset: Some("tiny".into()),
        config_hash: "sha256:0".into(),
        profile: HardwareKnobs {
            name: Some("cpu".into()),
            micro_batch: 4,
            gen_batch: None,
            grad_accum: 2,
            precision: "fp32".into(),
            backend: "cpu".into(),
            device: "flex:cpu".into(),
            threads: Some(2),
        },
        started_at: "2026-11-25T00:00:00Z".into(),
        finished_at: None,
        environment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips_with_its_fields_at_the_top_level() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = example();
        write(dir.path(), &manifest).unwrap();
        let text = std::fs::read_to_string(dir.path().join(MANIFEST_FILE)).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        // The same layout envgen always wrote: environment keys beside run_id.
        assert_eq!(value["where"], "docker");
        assert_eq!(value["image"]["ref"], "envgen/cpu:x");
        assert_eq!(value["image"]["repo_digest"], Value::Null);
        assert!(value.get("unknown").is_none() && value.get("sweep").is_none());
        assert_eq!(read(dir.path()).unwrap(), manifest);
    }

    #[test]
    fn a_command_record_round_trips_and_old_manifests_have_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut manifest = example();
        assert!(serde_json::to_value(&manifest)
            .unwrap()
            .get("command")
            .is_none());
        manifest.environment.command = Some(CommandRecord {
            argv: vec!["python".into(), "train.py".into()],
            workdir: "/src".into(),
            git: Some(GitRecord {
                toplevel: "/src".into(),
                commit: Some("abc".into()),
                diff_hash: None,
                untracked: vec!["notes.txt".into()],
            }),
            env: [("HF_TOKEN".to_string(), "<set>".to_string())].into(),
        });
        write(dir.path(), &manifest).unwrap();
        assert_eq!(read(dir.path()).unwrap(), manifest);
        // A manifest from before issue #40 holding secrets in clear is read
        // with them redacted (show, compare and the reports read through here).
        let mut old = manifest.clone();
        let command = old.environment.command.as_mut().unwrap();
        command.env.insert("HF_CREDENTIAL".into(), "hunter2".into());
        command
            .env
            .insert("HF_ENDPOINT".into(), "https://u:hunter2@mirror".into());
        command.argv.push("--mirror=https://u:hunter2@m".into());
        write(dir.path(), &old).unwrap();
        let seen = serde_json::to_string(&read(dir.path()).unwrap()).unwrap();
        assert!(!seen.contains("hunter2"), "{seen}");
        assert!(seen.contains("https://<redacted>@mirror"), "{seen}");
        let mut value = serde_json::to_value(&manifest).unwrap();
        value["command"]["git"]["comit"] = "x".into();
        rundir::write_json(&dir.path().join(MANIFEST_FILE), &value).unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(format!("{err:#}").contains("comit"), "{err:#}");
    }

    #[test]
    fn a_cluster_image_keeps_its_own_fields() {
        let text = r#"{"ref": "/img/cpu", "runtime": "charliecloud", "digest": "sha256:1", "digest_of": "usr/local/bin/envgen"}"#;
        let image: ImageRecord = serde_json::from_str(text).unwrap();
        assert!(matches!(&image, ImageRecord::Cluster(c) if c.runtime == "charliecloud"));
        assert_eq!(image.docker_id(), None);
        let back: Value = serde_json::to_value(&image).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn a_misspelt_or_newer_field_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut value = serde_json::to_value(example()).unwrap();
        value["wolrd_size"] = 2.into();
        rundir::write_json(&dir.path().join(MANIFEST_FILE), &value).unwrap();
        let err = read(dir.path()).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&err), 2);
        assert!(
            format!("{err:#}").contains("unknown field `wolrd_size`"),
            "{err:#}"
        );

        let mut value = serde_json::to_value(example()).unwrap();
        value["manifest_version"] = (MANIFEST_VERSION + 1).into();
        rundir::write_json(&dir.path().join(MANIFEST_FILE), &value).unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(
            format!("{err:#}").contains("newer than this envgen reads"),
            "{err:#}"
        );
    }

    #[test]
    fn a_version_one_manifest_is_read_and_migrated() {
        // As envgen wrote them before the version field (trimmed host).
        let text = r#"{"run_id": "gpt2-tiny-1", "experiment": "gpt2", "preset": "tiny",
            "config_hash": "sha256:9", "profile": {"micro_batch": 8, "grad_accum": 1,
            "precision": "fp32", "backend": "cpu", "device": "flex:cpu"},
            "started_at": "t0", "finished_at": "t1", "envgen_version": "0.1.0",
            "git_revision": null, "image": null, "where": "native",
            "where_reason": "--where native", "world_size": 1}"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), text).unwrap();
        let manifest = read(dir.path()).unwrap();
        assert_eq!(manifest.manifest_version, MANIFEST_VERSION);
        assert_eq!(manifest.environment.place, Place::Native);
        assert_eq!(manifest.profile.threads, None);
        update(dir.path(), |m| m.environment.world_size = Some(2)).unwrap();
        let value: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(MANIFEST_FILE)).unwrap())
                .unwrap();
        assert_eq!(value["manifest_version"], MANIFEST_VERSION);
        assert_eq!(value["world_size"], 2);
    }

    /// A run directory written before issue #41 (`"where"` a string,
    /// manifest_version 2), as tests/fixtures/run-v2 keeps it.
    const V2_RUN: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/run-v2/gpt2-tiny-20261127-233332-a8268a0a"
    );

    #[test]
    fn a_version_two_manifest_is_read_with_a_typed_place() {
        let text = std::fs::read_to_string(Path::new(V2_RUN).join(MANIFEST_FILE)).unwrap();
        let old: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(old["manifest_version"], 2);
        for (word, place) in [
            ("native", Place::Native),
            ("docker", Place::Docker),
            ("slurm", Place::Slurm),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut value = old.clone();
            value["where"] = word.into();
            rundir::write_json(&dir.path().join(MANIFEST_FILE), &value).unwrap();
            let manifest = read(dir.path()).unwrap();
            assert_eq!(manifest.manifest_version, MANIFEST_VERSION);
            assert_eq!(manifest.environment.place, place);
            assert_eq!(manifest.run_id, old["run_id"]);
            // Written back, the place is the same word.
            update(dir.path(), |_| ()).unwrap();
            let back: Value = rundir::read_json(&dir.path().join(MANIFEST_FILE)).unwrap();
            assert_eq!(back["where"], word);
            assert_eq!(back["manifest_version"], MANIFEST_VERSION);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut value = old;
        value["where"] = "podman".into();
        rundir::write_json(&dir.path().join(MANIFEST_FILE), &value).unwrap();
        let err = format!("{:#}", read(dir.path()).unwrap_err());
        assert!(err.contains("podman"), "{err}");
    }

    #[test]
    fn earlier_attempts_are_kept_in_order() {
        let dir = tempfile::tempdir().unwrap();
        keep_attempt(dir.path()).unwrap();
        assert!(!dir.path().join("attempts").exists(), "nothing to keep");
        for status in ["interrupted", "failed"] {
            std::fs::write(dir.path().join("summary.json"), status).unwrap();
            keep_attempt(dir.path()).unwrap();
        }
        assert!(!dir.path().join("summary.json").exists());
        let kept = |n: u32| {
            std::fs::read_to_string(dir.path().join(format!("attempts/summary-{n}.json"))).unwrap()
        };
        assert_eq!(
            (kept(1).as_str(), kept(2).as_str()),
            ("interrupted", "failed")
        );
    }
}
