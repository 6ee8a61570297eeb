{
  description = "envgen: reproducible deep-learning research environments on any NVIDIA machine";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.05";
    flake-utils.url = "github:numtide/flake-utils";
    # The Rust toolchain of rust-toolchain.toml (1.95.0), not nixpkgs' rustc:
    # nixos-25.05's is older than the 1.92 burn 0.21 needs.
    rust-overlay = {
      url = "github:oxalica/rust-overlay";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs = { self, nixpkgs, flake-utils, rust-overlay }:
    flake-utils.lib.eachSystem [ "x86_64-linux" "aarch64-linux" ] (system:
      let
        pkgs = import nixpkgs {
          inherit system;
          overlays = [ rust-overlay.overlays.default ];
        };
        # rust-toolchain.toml names only the channel: rust-overlay then takes
        # rustup's default profile (rustc, cargo, rust-std, rustfmt, clippy).
        rustToolchain = pkgs.rust-bin.fromRustupToolchainFile ./rust-toolchain.toml;
        rustPlatform = pkgs.makeRustPlatform {
          cargo = rustToolchain;
          rustc = rustToolchain;
        };
        # CUDA is unfree: only the `cuda` shell evaluates nixpkgs with it allowed.
        cudaPkgs = import nixpkgs {
          inherit system;
          config = { allowUnfree = true; cudaSupport = true; };
        };

        # What every contributor needs: the Rust toolchain, pkg-config, the
        # docker and Slurm clients the launch code talks to, and the tools the
        # test script starts (registry, charliecloud).
        commonTools = with pkgs; [
          rustToolchain
          pkg-config
          docker-client
          slurm
          charliecloud
          jq
        ];

        envgen = rustPlatform.buildRustPackage {
          pname = "envgen";
          version = (builtins.fromTOML (builtins.readFile ./Cargo.toml)).workspace.package.version;
          src = ./.;
          cargoLock.lockFile = ./Cargo.lock;
          nativeBuildInputs = [ pkgs.pkg-config ];
          # The integration tests need dockerd and Slurm: run them with
          # scripts/test.sh, not inside the sandbox.
          doCheck = false;
          meta = {
            description = "Reproducible deep-learning research environments on any NVIDIA machine";
            mainProgram = "envgen";
          };
        };

        # The CUDA pieces envgen's readiness check asks for under one
        # CUDA_PATH: NVRTC, the headers the kernels include (cuda_bf16.h and
        # cuda_fp16.h from cudart, mma.h from nvcc) and CCCL (nv/target,
        # cuda/barrier), plus ptxas, cuBLAS and cuDNN. nixpkgs splits each
        # package into outputs (lib, dev, static…): every output is joined.
        cudaRoot = cudaPkgs.symlinkJoin {
          name = "envgen-cuda";
          paths = builtins.concatMap (p: p.all or [ p ]) (with cudaPkgs.cudaPackages; [
            cuda_nvcc
            cuda_nvrtc
            cuda_cudart
            cuda_cccl
            libcublas
            cudnn
          ]);
        };
      in
      {
        packages.default = envgen;

        # `nix develop`: everything to build envgen and run its tests.
        devShells.default = pkgs.mkShell {
          packages = commonTools;
          RUST_BACKTRACE = "1";
        };

        # `nix develop .#cuda`: the same plus the CUDA toolkit for Burn's
        # CUDA backend, under one CUDA_PATH (cudaRoot above).
        devShells.cuda = pkgs.mkShell {
          packages = commonTools ++ [ cudaRoot ];
          shellHook = ''
            export CUDA_PATH=${cudaRoot}
            # libcuda comes from the host driver, never from nixpkgs.
            export LD_LIBRARY_PATH=/run/opengl-driver/lib:/usr/lib/x86_64-linux-gnu''${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
          '';
        };
      });
}
