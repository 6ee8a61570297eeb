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
# Headless Chromium renders `runs report` pages in tests/it/runs/report_cli.rs
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
# Each heavy area's time with the turn (tests/it/common/turns.rs) is
# appended to this file; a passing run prints the sums: where the time goes.
export ENVGEN_TEST_AREA_TIMES="$ENVGEN_TEST_STATE/area-times.tsv"
: >"$ENVGEN_TEST_AREA_TIMES"
started_at=$SECONDS
# Extra arguments go to cargo test (e.g. --no-fail-fast); CI passes none.
# No backtraces: CI keeps the end of a failure's output, and that end must
# be the assertion's message, not the harness's frames (nor this table).
RUST_BACKTRACE=0 cargo test --workspace --locked "$@"
log "cargo test took $((SECONDS - started_at)) s; the heavy areas' turns (s):"
awk -F'\t' '{ s[$1] += $2 } END { for (a in s) printf "%8.0f  %s\n", s[a], a }' \
  "$ENVGEN_TEST_AREA_TIMES" | sort -rn
