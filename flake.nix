{
  description = "envgen: reproducible deep-learning research environments on any NVIDIA machine";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.05";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachSystem [ "x86_64-linux" "aarch64-linux" ] (system:
      let
        pkgs = import nixpkgs { inherit system; };
        # CUDA is unfree: only the `cuda` shell evaluates nixpkgs with it allowed.
        cudaPkgs = import nixpkgs {
          inherit system;
          config = { allowUnfree = true; cudaSupport = true; };
        };

        # What every contributor needs: the Rust toolchain, pkg-config, the
        # docker and Slurm clients the launch code talks to, and the tools the
        # test script starts (registry, charliecloud).
        commonTools = with pkgs; [
          cargo
          rustc
          rustfmt
          clippy
          pkg-config
          docker-client
          slurm
          charliecloud
          jq
        ];

        envgen = pkgs.rustPlatform.buildRustPackage {
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
      in
      {
        packages.default = envgen;

        # `nix develop`: everything to build envgen and run its tests.
        devShells.default = pkgs.mkShell {
          packages = commonTools;
          RUST_BACKTRACE = "1";
        };

        # `nix develop .#cuda`: the same plus the CUDA toolkit (nvcc, NVRTC,
        # headers) from nixpkgs' cudaPackages, for Burn's CUDA backend.
        devShells.cuda = pkgs.mkShell {
          packages = commonTools ++ (with cudaPkgs.cudaPackages; [
            cuda_nvcc
            cuda_nvrtc
            cuda_cudart
            cudnn
          ]);
          shellHook = ''
            export CUDA_PATH=${cudaPkgs.cudaPackages.cuda_nvcc}
            # libcuda comes from the host driver, never from nixpkgs.
            export LD_LIBRARY_PATH=/run/opengl-driver/lib:/usr/lib/x86_64-linux-gnu''${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
          '';
        };
      });
}
