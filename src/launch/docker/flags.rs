//! The Docker place's own flags, checked with the request (before anything
//! is made): `--gpus`, and the container knobs Docker would silently ignore.

use crate::error::{Result, UserError};
use crate::image::daemon::container::GpuRequest;
use crate::image::daemon::options::Ipc;
use crate::launch::command;
use crate::launch::flags::RunFlags;

/// The Docker place's flags, checked (`launch::place_options`): `--gpus`
/// parsed, and the combinations Docker would silently ignore refused.
pub fn check_flags(flags: &RunFlags) -> Result<Option<GpuRequest>> {
    let gpus = flags.launch.gpus.as_deref().map(parse_gpus).transpose()?;
    let options = &flags.launch.docker;
    if options.ipc == Ipc::Host && options.shm_size_bytes.is_some() {
        return Err(UserError::usage(
            "--shm-size with --ipc host: the container uses the host's /dev/shm, so the size would be ignored",
        )
        .with_fix("keep one: --ipc host (the host's /dev/shm) or --shm-size SIZE (its own)")
        .into());
    }
    if options.writable_workspace && flags.experiment != command::NAME {
        return Err(UserError::usage(format!(
            "--writable-workspace is for your own command's code; envgen run {} mounts none",
            flags.experiment
        ))
        .with_fix("drop it (a bundled experiment writes into its run directory), or run your code: envgen run --where docker --writable-workspace -- python train.py")
        .into());
    }
    if flags.detach {
        return Err(UserError::usage(
            "--detach is for Slurm jobs: a Docker run is followed until it ends",
        )
        .with_fix("drop --detach (Ctrl-C stops the container and keeps the run resumable), or use --where slurm")
        .into());
    }
    Ok(gpus)
}

/// `--gpus` for Docker: all, a count, or device IDs.
fn parse_gpus(spec: &str) -> Result<GpuRequest> {
    if spec == "all" {
        return Ok(GpuRequest::All);
    }
    if let Ok(n) = spec.parse::<i64>() {
        if n > 0 {
            return Ok(GpuRequest::Count(n));
        }
    }
    let ids: Vec<String> = spec.split(',').map(str::trim).map(str::to_owned).collect();
    if ids
        .iter()
        .any(|id| id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(UserError::usage(format!(
            "--gpus {spec:?}: not `all`, a count, or device IDs"
        ))
        .with_fix("e.g. --gpus all, --gpus 2, --gpus 0,1 or --gpus GPU-<uuid>")
        .into());
    }
    Ok(GpuRequest::Devices(ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_all_a_count_or_ids() {
        assert_eq!(parse_gpus("all").unwrap(), GpuRequest::All);
        assert_eq!(parse_gpus("2").unwrap(), GpuRequest::Count(2));
        assert_eq!(
            parse_gpus("0,GPU-ab").unwrap(),
            GpuRequest::Devices(vec!["0".into(), "GPU-ab".into()])
        );
        for bad in ["", "0,,1", "a b", "$(x)"] {
            let err = parse_gpus(bad).unwrap_err();
            assert_eq!(crate::error::exit_code_of(&err), 2, "{bad}");
        }
    }
}
