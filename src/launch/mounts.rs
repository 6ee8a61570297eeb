//! Every host ↔ container path mapping of a run, in one place.
//!
//! Docker: the run directory is bind-mounted read-write at the fixed path
//! [`CONTAINER_RUN_DIR`] and each data directory read-only at
//! [`CONTAINER_DATA_DIR`]`/N`, whatever their host paths: the daemon
//! resolves a bind mount's source as root, so the modes of the host path's
//! parents (a 0700 home directory) never matter to the container user, and
//! nothing of the host's layout leaks into the container. The science config
//! keeps its host paths (its hash is unchanged); the container's envgen maps
//! them through [`PATH_MAP_ENV`] and the summary's data files are mapped back.
//! Slurm containers see the run directories' parents and the data at the
//! same paths as the host ([`same_path_binds`]).

use std::path::{Path, PathBuf};

use crate::image::daemon::container::{GpuRequest, Mount};

/// Where the run directory is mounted in the container.
pub const CONTAINER_RUN_DIR: &str = "/run/envgen/run";
/// Where data directory N is mounted (read-only) in the container.
pub const CONTAINER_DATA_DIR: &str = "/run/envgen/data";
/// Where the host's CUDA kernel cache (`<cache>/cubecl`) is mounted for GPU
/// runs, so a container compiles a kernel once per host, not once per run.
pub const CONTAINER_CACHE_DIR: &str = "/run/envgen/cache";
/// Where a user command's code (its git top level) is mounted, read-only.
pub const CONTAINER_WORKSPACE: &str = "/workspace";
/// `HOST=CONTAINER` pairs, `\n`-separated: how the container's envgen maps
/// the host paths in the science config to the mounts.
pub const PATH_MAP_ENV: &str = "ENVGEN_PATH_MAP";

/// How a config names a Hugging Face directory (`envgen_experiments::pretrained::PREFIX`).
const HF_PREFIX: &str = "hf:";

/// Keys of a science config whose string values are paths: `path`,
/// `*_path` and `*_dir` (the one rule both the scan and the mapping use).
fn is_path_key(key: &str) -> bool {
    key == "path" || key.ends_with("_path") || key.ends_with("_dir")
}

/// Call `visit` on every path-valued string of a science config.
fn visit_paths(value: &mut toml::Value, key: &str, visit: &mut impl FnMut(&mut String)) {
    match value {
        toml::Value::Table(table) => table.iter_mut().for_each(|(k, v)| visit_paths(v, k, visit)),
        toml::Value::Array(items) => items.iter_mut().for_each(|v| visit_paths(v, key, visit)),
        toml::Value::String(text) if is_path_key(key) => visit(text),
        // A checkpoint named `hf:DIR` (rft's `model.init`): the directory
        // is mounted and mapped like a data path, the prefix kept.
        toml::Value::String(text) if key == "init" && text.starts_with(HF_PREFIX) => {
            let mut dir = text[HF_PREFIX.len()..].to_string();
            visit(&mut dir);
            *text = format!("{HF_PREFIX}{dir}");
        }
        _ => {}
    }
}

/// Host directories a science config reads: every path it names that
/// exists (a file's directory), absolute, sorted, once each.
pub fn data_dirs(science: &toml::Value) -> Vec<PathBuf> {
    let mut out = Vec::new();
    visit_paths(&mut science.clone(), "", &mut |text| {
        let path = Path::new(text.as_str());
        let dir = if path.is_file() {
            path.parent()
        } else {
            Some(path)
        };
        if let Some(dir) = dir.filter(|d| d.is_dir()) {
            if let Ok(abs) = std::path::absolute(dir) {
                out.push(abs);
            }
        }
    });
    out.sort();
    out.dedup();
    out
}

/// Rewrite the path-like strings of a science config through `map` (host
/// prefix → container prefix, longest first).
pub fn map_paths(science: &mut toml::Value, map: &[(PathBuf, PathBuf)]) {
    visit_paths(science, "", &mut |text| {
        if let Some(mapped) = map_path(Path::new(text.as_str()), map) {
            *text = mapped.display().to_string();
        }
    });
}

/// `path` through `map` (the longest host prefix wins); None when no
/// prefix matches.
pub fn map_path(path: &Path, map: &[(PathBuf, PathBuf)]) -> Option<PathBuf> {
    map.iter()
        .filter_map(|(host, inside)| {
            path.strip_prefix(host)
                .ok()
                .map(|rest| (host, inside, rest))
        })
        .max_by_key(|(host, _, _)| host.as_os_str().len())
        .map(|(_, inside, rest)| inside.join(rest))
}

/// Mount a user command's code at [`CONTAINER_WORKSPACE`] (read-only
/// unless `--writable-workspace`) and add it to the path map, so the
/// container's envgen runs the command in the same directory of it
/// (`docker_mounts`' env must hold the map).
pub fn add_workspace(
    mounts: &mut Vec<Mount>,
    env: &mut [(String, String)],
    host: &Path,
    read_only: bool,
) {
    mounts.push(Mount {
        host: host.to_path_buf(),
        container: CONTAINER_WORKSPACE.to_string(),
        read_only,
    });
    if let Some((_, map)) = env.iter_mut().find(|(name, _)| name == PATH_MAP_ENV) {
        map.push_str(&format!("\n{}={CONTAINER_WORKSPACE}", host.display()));
    }
}

/// Parse [`PATH_MAP_ENV`] (empty outside a container).
pub fn path_map_from_env() -> Vec<(PathBuf, PathBuf)> {
    std::env::var(PATH_MAP_ENV)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(host, inside)| (PathBuf::from(host), PathBuf::from(inside)))
        .collect()
}

/// The host path of a path inside the container (data mounts only), for
/// provenance written by the container's envgen (`data_files[].path`).
pub fn host_path(inside: &str, data_dirs: &[PathBuf]) -> Option<PathBuf> {
    let rest = Path::new(inside).strip_prefix(CONTAINER_DATA_DIR).ok()?;
    let mut parts = rest.components();
    let index: usize = parts.next()?.as_os_str().to_str()?.parse().ok()?;
    Some(data_dirs.get(index)?.join(parts.as_path()))
}

/// This user's kernel cache folder (created if missing), for GPU containers;
/// None when there is no cache folder or it cannot be made.
fn kernel_cache_on_host() -> Option<PathBuf> {
    let dir = envgen_experiments::kernel_cache::cache_dir()?.join("cubecl");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// The mounts of a Docker run and the environment that tells its envgen
/// about them: run directory (rw), data directories (ro), and for GPU
/// containers the kernel cache (rw).
pub fn docker_mounts(
    run_dir: &Path,
    data_dirs: &[PathBuf],
    gpus: &GpuRequest,
) -> (Vec<Mount>, Vec<(String, String)>) {
    let mut mounts = vec![Mount {
        host: run_dir.to_path_buf(),
        container: CONTAINER_RUN_DIR.to_string(),
        read_only: false,
    }];
    let mut path_map = vec![format!("{}={CONTAINER_RUN_DIR}", run_dir.display())];
    for (index, data) in data_dirs.iter().enumerate() {
        let inside = format!("{CONTAINER_DATA_DIR}/{index}");
        path_map.push(format!("{}={inside}", data.display()));
        mounts.push(Mount {
            host: data.clone(),
            container: inside,
            read_only: true,
        });
    }
    let mut env = vec![(PATH_MAP_ENV.to_string(), path_map.join("\n"))];
    if *gpus != GpuRequest::None {
        if let Some(cache) = kernel_cache_on_host() {
            mounts.push(Mount {
                host: cache,
                container: format!("{CONTAINER_CACHE_DIR}/cubecl"),
                read_only: false,
            });
            env.push(("ENVGEN_CACHE_DIR".into(), CONTAINER_CACHE_DIR.into()));
        }
    }
    (mounts, env)
}

/// Slurm container binds: the run directories' parents and the data, at
/// the same paths as on the host.
pub fn same_path_binds(runs: &[PathBuf], data_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut binds: Vec<PathBuf> = runs
        .iter()
        .filter_map(|r| r.parent().map(Path::to_path_buf))
        .chain(data_dirs.iter().cloned())
        .collect();
    binds.sort();
    binds.dedup();
    binds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #39: `--writable-workspace` is the one way the code is writable.
    #[test]
    fn the_workspace_is_read_only_unless_asked() {
        for read_only in [true, false] {
            let mut mounts = Vec::new();
            let mut env = vec![(
                PATH_MAP_ENV.to_string(),
                "/runs/x=/run/envgen/run".to_string(),
            )];
            add_workspace(&mut mounts, &mut env, Path::new("/home/me/repo"), read_only);
            assert_eq!(mounts.len(), 1);
            assert_eq!(mounts[0].container, CONTAINER_WORKSPACE);
            assert_eq!(mounts[0].read_only, read_only);
            assert!(env[0]
                .1
                .ends_with(&format!("\n/home/me/repo={CONTAINER_WORKSPACE}")));
        }
    }

    #[test]
    fn host_paths_in_the_config_map_to_the_mounts() {
        let mut science: toml::Value = toml::from_str(
            "[data]\npath = \"/home/u/private/data/corpus.txt\"\nval_path = \"/elsewhere/v.txt\"\nname = \"/home/u/private/data/x\"\n",
        )
        .unwrap();
        let map = vec![
            (PathBuf::from("/home/u"), PathBuf::from("/nope")),
            (
                PathBuf::from("/home/u/private/data"),
                PathBuf::from("/run/envgen/data/0"),
            ),
        ];
        map_paths(&mut science, &map);
        assert_eq!(
            science["data"]["path"].as_str(),
            Some("/run/envgen/data/0/corpus.txt")
        );
        assert_eq!(
            science["data"]["val_path"].as_str(),
            Some("/elsewhere/v.txt")
        );
        assert_eq!(
            science["data"]["name"].as_str(),
            Some("/home/u/private/data/x")
        );
    }

    /// rft's `model.init = "hf:DIR"` is mounted and mapped, the prefix kept.
    #[test]
    fn an_hf_checkpoint_is_mounted_and_mapped_like_data() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("[model]\ninit = \"hf:{}\"\n", dir.path().display());
        let mut science: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            data_dirs(&science),
            vec![std::path::absolute(dir.path()).unwrap()]
        );
        let map = vec![(
            dir.path().to_path_buf(),
            PathBuf::from("/run/envgen/data/0"),
        )];
        map_paths(&mut science, &map);
        assert_eq!(
            science["model"]["init"].as_str(),
            Some("hf:/run/envgen/data/0/")
        );
        let mut random: toml::Value =
            toml::from_str("[model]\ninit = \"random:tiny-llama\"\n").unwrap();
        map_paths(&mut random, &map);
        assert_eq!(random["model"]["init"].as_str(), Some("random:tiny-llama"));
    }

    #[test]
    fn data_mount_paths_map_back_to_the_host() {
        let dirs = vec![PathBuf::from("/a"), PathBuf::from("/home/u/data")];
        assert_eq!(
            host_path("/run/envgen/data/1/sub/x.bin", &dirs),
            Some(PathBuf::from("/home/u/data/sub/x.bin"))
        );
        assert_eq!(host_path("/run/envgen/data/7/x", &dirs), None);
        assert_eq!(host_path("/elsewhere/x", &dirs), None);
    }

    #[test]
    fn the_scan_finds_existing_data_directories_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("corpus.txt");
        std::fs::write(&file, "x").unwrap();
        let text = format!(
            "[data]\npath = {:?}\nval_path = {:?}\ncache_dir = \"/no/such/dir\"\nname = {:?}\n",
            file,
            dir.path(),
            dir.path()
        );
        let science: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(data_dirs(&science), vec![dir.path().to_path_buf()]);
    }

    #[test]
    fn docker_data_mounts_are_read_only_and_the_run_dir_is_not() {
        let (mounts, env) = docker_mounts(
            Path::new("/home/u/runs/r1"),
            &[PathBuf::from("/data/a")],
            &GpuRequest::None,
        );
        assert_eq!(mounts.len(), 2);
        assert!(!mounts[0].read_only && mounts[0].container == CONTAINER_RUN_DIR);
        assert!(mounts[1].read_only && mounts[1].container == "/run/envgen/data/0");
        assert_eq!(
            env[0].1,
            "/home/u/runs/r1=/run/envgen/run\n/data/a=/run/envgen/data/0"
        );
    }
}
