#!/usr/bin/env bash
# The main job on the embedded default: build envgen, check the host, and
# train the tiny GPT-2 preset on the corpus envgen generates itself.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
cd "$here/.."
require_rust
apt_install pkg-config ca-certificates
cargo build --release --locked
./target/release/envgen doctor
exec ./target/release/envgen run gpt2 "$@"
