//! Shared by the tests of Docker runs (`run_docker`, `runs_cli`): a test
//! image holding this build's envgen, and the containers left of a run.

use std::path::Path;

use bollard::query_parameters::ListContainersOptionsBuilder;

use super::run::minimal_rootfs;

pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Import a root filesystem with this build's envgen as `envgen-test/run:TAG`;
/// `marker` makes the layer (hence the image ID) differ between tags.
pub fn import_image(tag: &str, marker: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    minimal_rootfs(root.path());
    // Like every Debian/Ubuntu image: root's home is private.
    std::fs::create_dir_all(root.path().join("root")).unwrap();
    let mut perms = std::fs::metadata(root.path().join("root"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o700);
    std::fs::set_permissions(root.path().join("root"), perms).unwrap();
    std::fs::write(root.path().join("etc/envgen-test-marker"), marker).unwrap();
    import_rootfs(root.path(), tag)
}

/// Import the root filesystem at `root` as `envgen-test/run:TAG`.
pub fn import_rootfs(root: &Path, tag: &str) -> String {
    let tar_dir = tempfile::tempdir().unwrap();
    let tarball = tar_dir.path().join("rootfs.tar");
    let mut builder = tar::Builder::new(std::fs::File::create(&tarball).unwrap());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", root).unwrap();
    builder.finish().unwrap();
    block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        envgen::image::daemon::import_rootfs(&docker, &tarball, "envgen-test/run", tag)
            .await
            .unwrap();
    });
    format!("envgen-test/run:{tag}")
}

/// Containers envgen started for the run in `dir` that still exist (it must
/// remove every one). Other tests' runs go on in parallel: filter by run.
pub fn leftover_containers(dir: &Path) -> Vec<String> {
    let label = format!("io.envgen.run={}", container_name(dir));
    block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&[("label", vec![label.as_str()])].into())
            .build();
        docker
            .list_containers(Some(options))
            .await
            .unwrap()
            .into_iter()
            .flat_map(|c| c.names.unwrap_or_default())
            .collect()
    })
}

/// A container named `name` (labelled as a run's, like envgen's own) from
/// `image` running `command`: left running when `running`, else run to
/// its end and left stopped — what a dockerd stopped under a run leaves.
pub fn make_container(name: &str, image: &str, command: &[&str], running: bool) {
    use bollard::models::ContainerCreateBody;
    use bollard::query_parameters::{CreateContainerOptionsBuilder, WaitContainerOptionsBuilder};
    use futures_util::StreamExt;
    block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(command.iter().map(|s| s.to_string()).collect()),
            labels: Some([("io.envgen.run".to_string(), name.to_string())].into()),
            network_disabled: Some(true),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        docker.create_container(Some(options), body).await.unwrap();
        docker.start_container(name, None).await.unwrap();
        if !running {
            let options = WaitContainerOptionsBuilder::default()
                .condition("not-running")
                .build();
            let _ = docker.wait_container(name, Some(options)).next().await;
        }
    });
}

/// Remove the container `name` (running or not), if there is one.
pub fn remove_container(name: &str) {
    use bollard::query_parameters::RemoveContainerOptionsBuilder;
    block_on(async {
        let docker = envgen::image::daemon::connect().await.unwrap();
        let options = RemoveContainerOptionsBuilder::default().force(true).build();
        let _ = docker.remove_container(name, Some(options)).await;
    });
}

/// The name envgen gives the container of the run in `dir`.
pub fn container_name(dir: &Path) -> String {
    envgen::launch::docker::container_name(dir)
}
