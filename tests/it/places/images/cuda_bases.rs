//! CUDA and NGC recipes on labelled stand-in bases (no NVIDIA image can be
//! pulled here).

use super::*;

/// What NVIDIA's CUDA 12.8 packages install that envgen's CUDA backend needs
/// (paths under /usr/local/cuda-12.8), which the FAKE packages carry as empty
/// files: the split of NVIDIA's CUDA 13.0 wheels (nvidia-cuda-runtime:
/// cuda_*.h and mma.h; nvidia-cuda-crt: crt/; nvidia-cuda-cccl: CCCL;
/// their RECORD files), with CCCL in include/ as CUDA 12 lays it out. A
/// profile that forgets one of these packages then fails the headers check
/// of `envgen doctor` inside its image.
const NVIDIA_PACKAGE_FILES: &[(&str, &[&str])] = &[
    (
        "cuda-cudart-dev-12-8",
        &[
            "include/cuda_runtime.h",
            "include/cuda_fp16.h",
            "include/cuda_bf16.h",
            "include/mma.h",
        ],
    ),
    ("cuda-crt-12-8", &["include/crt/host_config.h"]),
    (
        "cuda-cccl-12-8",
        &["include/nv/target", "include/cuda/barrier"],
    ),
    (
        "cuda-nvrtc-12-8",
        &["lib64/libnvrtc.so.12", "lib64/libnvrtc-builtins.so.12.8"],
    ),
];

/// A FAKE Debian package (its control data and, for the packages in
/// [`NVIDIA_PACKAGE_FILES`], empty files where the real one has them), for
/// the stand-in apt repository: (name, version) → `name_version_all.deb` in `dir`.
fn fake_deb(dir: &Path, name: &str, version: &str) -> std::path::PathBuf {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("DEBIAN")).unwrap();
    for (package, files) in NVIDIA_PACKAGE_FILES {
        if *package != name {
            continue;
        }
        for file in *files {
            let path = root.path().join("usr/local/cuda-12.8").join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
    }
    std::fs::write(
        root.path().join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: envgen tests <envgen@example.invalid>\nDescription: FAKE stand-in for NVIDIA's {name} (envgen tests; empty files only)\n"
        ),
    )
    .unwrap();
    let deb = dir.join(format!("{name}_{version}_all.deb"));
    ok(run(
        "dpkg-deb",
        &[
            "--root-owner-group",
            "--build",
            root.path().to_str().unwrap(),
            deb.to_str().unwrap(),
        ],
    ));
    deb
}

/// A flat apt repository (`deb [trusted=yes] file:/… ./`) of FAKE packages.
fn fake_apt_repo(dir: &Path, packages: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut index = String::new();
    for (name, version) in packages {
        let deb = fake_deb(dir, name, version);
        let bytes = std::fs::read(&deb).unwrap();
        let control = ok(run("dpkg-deb", &["--field", deb.to_str().unwrap()]));
        index.push_str(&String::from_utf8_lossy(&control.stdout));
        index.push_str(&format!(
            "Filename: ./{}\nSize: {}\nSHA256: {}\n\n",
            deb.file_name().unwrap().to_string_lossy(),
            bytes.len(),
            envgen::image::lock::sha256_hex(&bytes)
        ));
    }
    std::fs::write(dir.join("Packages"), index).unwrap();
}

/// Build a stand-in base `tag` from the Debian stand-in: the CUDA layout
/// (`/usr/local/cuda` → `cuda-12.x`), the base's env and, when `apt` is not
/// empty, a local apt repository of FAKE packages in place of NVIDIA's. The
/// Debian sources are removed, so its apt sees only the FAKE repository.
fn stand_in_base(tag: &str, cuda: &str, env: &[(&str, &str)], apt: &[(&str, &str)]) {
    let context = tempfile::tempdir().unwrap();
    fake_apt_repo(&context.path().join("fake-repo"), apt);
    let mut dockerfile = format!(
        "FROM {BASE}\n\
         LABEL io.envgen.test.stand-in=\"FAKE: Debian 12 with the layout of {tag}; not NVIDIA's image\"\n\
         RUN mkdir -p /usr/local/cuda-{cuda}/lib64 /usr/local/cuda-{cuda}/include \
          && ln -s cuda-{cuda} /usr/local/cuda \
          && echo 'FAKE stand-in (envgen tests)' > /usr/local/cuda-{cuda}/FAKE-STAND-IN \
          && rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*\n\
         COPY fake-repo /var/local/fake-nvidia-repo\n\
         RUN echo 'deb [trusted=yes] file:/var/local/fake-nvidia-repo ./' > /etc/apt/sources.list.d/fake-nvidia.list\n"
    );
    for (key, value) in env {
        dockerfile.push_str(&format!("ENV {key}=\"{value}\"\n"));
    }
    std::fs::write(context.path().join("Dockerfile"), dockerfile).unwrap();
    ok(docker(&[
        "build",
        "--network",
        "host",
        "-t",
        tag,
        context.path().to_str().unwrap(),
    ]));
}

// The cuda12.8 and NGC recipes, rendered from the committed lock (FROM
// pinned by digest), built on labelled local stand-ins for their bases
// (the real ones cannot be pulled here): every RUN/ENV/COPY/USER step runs,
// the apt step installs the pinned versions from a FAKE repository (the
// packages are empty: what NVRTC needs at run time is not tested here), and
// the image carries the profile's CUDA rule, its labels and a working envgen.
heavy_test!(
    cuda_and_ngc_recipes_build_on_labelled_stand_in_bases,
    || {
        let _daemon = daemon();
        let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("containers");
        let cuda = envgen::image::Containers::locate(Some(&profiles))
            .unwrap()
            .profile("cuda12.8")
            .unwrap();
        let apt: Vec<(&str, &str)> = cuda
            .apt
            .iter()
            .map(|(name, version)| (name.as_str(), version.as_str()))
            .collect();
        let base_rule = cuda.cuda.as_ref().unwrap().require.clone();
        stand_in_base(
            "envgen-test/stand-in-cuda:12.8.1-runtime-ubuntu24.04",
            "12.8",
            &[
                ("CUDA_VERSION", "12.8.1"),
                ("NVIDIA_REQUIRE_CUDA", &base_rule),
            ],
            &apt,
        );
        stand_in_base(
            "envgen-test/stand-in-ngc:25.06-py3",
            "12.9",
            &[
                ("CUDA_VERSION", "12.9.1.010"),
                ("NVIDIA_REQUIRE_CUDA", "cuda>=9.0"),
                ("PYTORCH_VERSION", "2.8.0a0+5228986c39"),
            ],
            &[],
        );
        let stand_ins = "nvidia/cuda:12.8.1-runtime-ubuntu24.04=envgen-test/stand-in-cuda:12.8.1-runtime-ubuntu24.04,\
                     nvcr.io/nvidia/pytorch:25.06-py3=envgen-test/stand-in-ngc:25.06-py3";
        for (profile, tag, require, pinned) in [
            (
                "cuda12.8",
                "envgen-test/cuda12.8:stand-in",
                base_rule.as_str(),
                "nvidia/cuda:12.8.1-runtime-ubuntu24.04@sha256:ebef3c17",
            ),
            (
                "ngc-pytorch-25.06",
                "envgen-test/ngc:stand-in",
                "cuda>=12.9",
                "nvcr.io/nvidia/pytorch:25.06-py3@sha256:025d9b10",
            ),
        ] {
            let output = envgen_image_with(
                &profiles,
                "build",
                &[profile, "--json", "--tag", tag],
                |command| {
                    command.env("ENVGEN_BASE_STAND_IN", stand_ins);
                },
            );
            assert!(output.status.success(), "{profile}: {}", text(&output));
            let built = build_result(&output);
            let labels = &built["labels"];
            assert_eq!(labels["io.envgen.profile"], profile);
            assert!(
                labels["io.envgen.base-stand-in"]
                    .as_str()
                    .is_some_and(|s| s.contains(&format!("in place of {pinned}"))),
                "{profile}: {labels}"
            );
            let env: Vec<String> =
                serde_json::from_str(&inspect(tag, "{{json .Config.Env}}")).unwrap();
            assert!(
                env.contains(&format!("NVIDIA_REQUIRE_CUDA={require}")),
                "{profile}: {env:?}"
            );
            assert!(env.contains(&"CUDA_PATH=/usr/local/cuda".to_string()));
            assert_eq!(inspect(tag, "{{.Config.User}}"), "1000:1000");
            let cuda_dir = ok(docker(&[
                "run",
                "--rm",
                "--network",
                "none",
                "--entrypoint",
                "/bin/cat",
                tag,
                "/usr/local/cuda/FAKE-STAND-IN",
            ]));
            assert!(stdout(&cuda_dir).contains("FAKE"));
            let doctor = ok(docker(&[
                "run",
                "--rm",
                "--network",
                "none",
                tag,
                "doctor",
                "--json",
            ]));
            let report: Value = serde_json::from_slice(&doctor.stdout)
                .unwrap_or_else(|err| panic!("{profile}: {err}\n{}", text(&doctor)));
            assert!(report["host"].is_object(), "{report}");
            if profile == "cuda12.8" {
                // The profile's packages bring every header the backend's
                // kernels include (CCCL too) and NVRTC's files; the driver comes
                // from the host at run time.
                let parts = &report["cuda_backend"]["parts"];
                assert_eq!(
                    parts["headers"], "ok",
                    "{profile}: {}",
                    report["cuda_backend"]
                );
                assert_ne!(
                    parts["nvrtc"], "no-nvrtc",
                    "{profile}: {}",
                    report["cuda_backend"]
                );
                assert_eq!(parts["driver"], "no-libcuda", "{}", report["cuda_backend"]);
            }
        }
        // The apt step installed exactly the pinned (FAKE) versions.
        let installed = ok(docker(&[
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "/usr/bin/dpkg-query",
            "envgen-test/cuda12.8:stand-in",
            "-W",
            "-f",
            "${Package}=${Version}\\n",
        ]));
        for (name, version) in &apt {
            assert!(
                stdout(&installed).contains(&format!("{name}={version}")),
                "{name}: {}",
                text(&installed)
            );
        }
    }
);
