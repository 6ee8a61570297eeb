#!/usr/bin/env bash
# The whole test suite, with the real services it needs: installs them from
# Debian if missing, starts private instances (own sockets and data dirs, so
# a developer's own daemons are never touched), runs the tests, stops them.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
cd "$here/.."
require_rust
apt_install pkg-config ca-certificates nix-bin

log "checking flake.nix parses"
nix-instantiate --parse flake.nix >/dev/null

log "cargo fmt --check"
cargo fmt --all -- --check

log "running the test suite"
cargo test --workspace --locked
