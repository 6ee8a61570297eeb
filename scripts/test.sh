#!/usr/bin/env bash
# The whole test suite, with the real services it needs: installs them from
# Debian if missing, starts private instances (own sockets and data dirs, so
# a developer's own daemons are never touched), runs the tests, stops them.
#
# Each service is a file scripts/services/NAME.sh defining NAME_start and
# NAME_stop; NAME_start exports what the tests need (DOCKER_HOST, …).
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
cd "$here/.."
require_rust
apt_install pkg-config ca-certificates nix-bin
# Mesa's software Vulkan driver (lavapipe): the GPU code paths (Burn's wgpu
# backend, CubeCL kernels) run in CI without a GPU, and must.
apt_install mesa-vulkan-drivers
export ENVGEN_TEST_REQUIRE_VULKAN=1
# Headless Chromium renders `runs report` pages in tests/it/report_cli.rs
# (every chart must have drawn data); that test fails without it.
apt_install chromium

export ENVGEN_TEST_STATE="${ENVGEN_TEST_STATE:-$PWD/.envgen-test}"
mkdir -p "$ENVGEN_TEST_STATE"

started=()
stop_services() {
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do
    "${started[$i]}_stop" || true
  done
}
trap stop_services EXIT

for svc in "$here"/services/*.sh; do
  [ -e "$svc" ] || continue
  name="$(basename "$svc" .sh)"
  source "$svc"
  log "starting $name"
  "${name}_start"
  started+=("$name")
done

log "checking flake.nix parses"
nix-instantiate --parse flake.nix >/dev/null

log "cargo fmt --check"
cargo fmt --all -- --check

log "running the test suite"
# Extra arguments go to cargo test (e.g. --no-fail-fast); CI passes none.
# No backtraces: CI keeps the end of a failure's output, and that end must
# be the assertion's message, not the harness's frames.
RUST_BACKTRACE=0 cargo test --workspace --locked "$@"
