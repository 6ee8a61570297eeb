# Builds of envgen that start on old Linux systems (sourced by
# scripts/release.sh and scripts/services/portable.sh; needs lib.sh).
#
# A binary linked on this machine asks for the glibc it was linked against
# (2.34+ on any current distribution), so it does not start on RHEL/Rocky 8
# (glibc 2.28) or CentOS 7 (2.17) login nodes. cargo-zigbuild links with
# zig, whose stub libraries carry any glibc version's symbols: a target
# written `x86_64-unknown-linux-gnu.2.17` gets a binary that asks for
# nothing newer than 2.17, the oldest glibc Rust's own std supports (and
# the manylinux2014 floor), so no login node in service is too old. The C
# built by build scripts (onig, the stand-in CUDA driver) goes through
# `zig cc` for the same target, so it stays within that floor too. CUDA's
# libraries are never linked: envgen dlopens them at run time.
#
# Both tools are pinned and installed on first use into a cache of their
# own (zig from PyPI's `ziglang` wheel, cargo-zigbuild from crates.io), so
# nothing here is needed to build envgen from source with plain cargo.

PORTABLE_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORTABLE_GLIBC=2.17
PORTABLE_ZIG=0.13.0
PORTABLE_ZIGBUILD=0.24.1

# Where the tools live: a cache of their own, so nothing here is needed to
# build envgen from source with plain cargo.
portable_tools_dir() {
  echo "${ENVGEN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/envgen-tools}"
}

# zig alone, from PyPI's `ziglang` wheel in a venv of its own, installed
# once; PORTABLE_ZIG_PYTHON is the python that runs it (`-m ziglang`,
# where cargo-zigbuild looks first) and is put first on PATH.
portable_zig() {
  local dir
  dir="$(portable_tools_dir)/zig-$PORTABLE_ZIG"
  if [ ! -f "$dir/.complete" ]; then
    log "portable: installing zig $PORTABLE_ZIG into $dir (first run only)"
    apt_install python3 python3-venv
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/python3" -m pip install --quiet --disable-pip-version-check "ziglang==$PORTABLE_ZIG"
    touch "$dir/.complete"
  fi
  export PORTABLE_ZIG_PYTHON="$dir/bin/python3"
  export PATH="$dir/bin:$PATH"
}

# zig and cargo-zigbuild on PATH (the release builds), installed once.
portable_tools() {
  local dir
  portable_zig
  dir="$(portable_tools_dir)/cargo-zigbuild-$PORTABLE_ZIGBUILD"
  if [ ! -f "$dir/.complete" ]; then
    log "portable: installing cargo-zigbuild $PORTABLE_ZIGBUILD into $dir (first run only)"
    rm -rf "$dir"
    cargo install --quiet --locked --root "$dir" --version "$PORTABLE_ZIGBUILD" cargo-zigbuild
    touch "$dir/.complete"
  fi
  export PATH="$dir/bin:$PATH"
}

# portable_build TRIPLE TARGET_DIR CARGO_ARGS...: `cargo zigbuild` of the
# envgen binary for TRIPLE (x86_64-unknown-linux-gnu, …) linked for glibc
# $PORTABLE_GLIBC. It lands in TARGET_DIR/TRIPLE/PROFILE/envgen.
portable_build() {
  local triple="$1" target_dir="$2"
  shift 2
  portable_tools
  cargo zigbuild --locked --bin envgen --target "$triple.$PORTABLE_GLIBC" \
    --target-dir "$target_dir" "$@"
}

# portable_relink_dev OUT: this checkout's dev-profile envgen, linked again
# by zig for this machine and glibc $PORTABLE_GLIBC, copied to OUT (the
# tests' portable binary). `cargo rustc` hands the linker to the binary
# alone: a linker in RUSTFLAGS or a [target] table is part of every crate's
# fingerprint, so every crate would compile twice (once per linker). Here
# the crates of the test build are shared and only the final link differs,
# a few seconds; the next `cargo test` links target/debug/envgen again with
# the usual linker. What differs from a release: no --target, so the C that
# build scripts compile (oniguruma, the stand-in driver) comes from the
# host's compiler, not zig's; the test holds it to the floor all the same.
portable_relink_dev() {
  local out="$1"
  portable_zig
  PORTABLE_ZIG_TARGET="$(uname -m)-linux-gnu.$PORTABLE_GLIBC" \
    cargo rustc --locked --bin envgen -- -C "linker=$PORTABLE_SCRIPTS/zig-cc.sh"
  mkdir -p "$(dirname "$out")"
  cp target/debug/envgen "$out"
}

# portable_check_glibc FILE: fail unless FILE asks for no glibc symbol
# version newer than $PORTABLE_GLIBC (readelf reads any architecture's ELF).
portable_check_glibc() {
  local newest
  newest="$(readelf -V --wide "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)"
  if [ -z "$newest" ] || [ "$(printf '%s\n' "$newest" "$PORTABLE_GLIBC" | sort -V | tail -n 1)" != "$PORTABLE_GLIBC" ]; then
    log "portable: $1 needs glibc ${newest:-(none found)}, not <= $PORTABLE_GLIBC"
    return 1
  fi
}

# portable_check PROFILE_DIR: the envgen binary there, and the stand-in CUDA
# driver build.rs compiled for it (the newest, should the build script have
# run more than once), are within the glibc floor and for the same machine:
# a stand-in compiled for the build host would not load into an aarch64
# envgen's child runs.
portable_check() {
  local binary="$1/envgen" standin machine
  standin="$(ls -t "$1"/build/envgen-*/out/libcuda_standin.so | head -n 1)"
  portable_check_glibc "$binary"
  portable_check_glibc "$standin"
  machine="$(readelf -h "$binary" | grep Machine:)"
  if [ "$(readelf -h "$standin" | grep Machine:)" != "$machine" ]; then
    log "portable: $standin is not for the binary's${machine#*:}"
    return 1
  fi
}
