# What tests/it/tree/portable_binary.rs checks (sourced by scripts/test.sh):
#
# - envgen linked the way scripts/release.sh links it (zig, glibc 2.17),
#   for this machine, in the dev profile (a release build would not fit
#   CI's time): scripts/portable.sh's portable_relink_dev links the test
#   build's own crates again with zig's linker, so this costs one link of a
#   few seconds, not a second build. On a fresh clone that first
#   `cargo rustc` compiles the crates the test run then reuses.
# - the libraries of an older glibc to run it on: Debian bullseye's libc6
#   (glibc 2.31, the oldest release deb.debian.org still serves), unpacked
#   from its .deb once into the test cache, without installing it.
#
# Exports ENVGEN_TEST_PORTABLE_BINARY and ENVGEN_TEST_OLD_GLIBC_ROOT; the
# test fails, never skips, when they are missing.

# An apt of its own for bullseye (own sources, lists and cache; no dpkg
# status, so bullseye's versions are the candidates), downloading PACKAGES
# into the current directory.
portable_apt_download() {
  local apt="$1"
  shift
  local opts=(
    -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
    -o Dir::State::Status=/dev/null -o Dir::Etc::Preferences=/dev/null
    -o Dir::Etc::PreferencesParts=/dev/null -o APT::Sandbox::User=root
  )
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  echo "deb http://deb.debian.org/debian bullseye main" >"$apt/sources.list"
  apt-get -qq "${opts[@]}" update
  apt-get -qq "${opts[@]}" download "$@" 2>/dev/null
}

# The folder holding bullseye's glibc and libgcc_s, unpacked once.
portable_old_glibc_root() {
  local cache="${ENVGEN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/envgen-test}"
  local root="$cache/glibc-2.31-bullseye-$(dpkg --print-architecture)"
  if [ ! -f "$root/.complete" ]; then
    log "portable: unpacking Debian bullseye's glibc 2.31 into $root (first run only)"
    rm -rf "$root" "$root.debs"
    mkdir -p "$root.debs"
    (cd "$root.debs" && portable_apt_download "$root.debs/apt" libc6 libgcc-s1)
    for deb in "$root.debs"/*.deb; do dpkg-deb -x "$deb" "$root"; done
    rm -rf "$root.debs"
    touch "$root/.complete"
  fi
  echo "$root"
}

portable_start() {
  source "$here/portable.sh"
  log "portable: linking envgen for glibc $PORTABLE_GLIBC (target/portable/envgen)"
  portable_relink_dev target/portable/envgen
  export ENVGEN_TEST_PORTABLE_BINARY="$PWD/target/portable/envgen"
  ENVGEN_TEST_OLD_GLIBC_ROOT="$(portable_old_glibc_root)"
  export ENVGEN_TEST_OLD_GLIBC_ROOT
}

portable_stop() { :; }
