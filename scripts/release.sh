#!/usr/bin/env bash
# Release binaries that start on any Linux with glibc >= 2.17 (RHEL/Rocky 7
# and 8 login nodes included; see scripts/portable.sh for how), stripped:
#
#   scripts/release.sh [ARCH...]     ARCH: x86_64, aarch64 (default: both)
#
# writes dist/envgen-VERSION-ARCH-linux-gnu.tar.gz (the binary and the
# README in a folder of that name) and dist/SHA256SUMS. Release builds go
# to target/release-dist/, apart from the dev builds. The aarch64 build
# needs Rust's standard library for it (`rustup target add
# aarch64-unknown-linux-gnu`); zig brings its C compiler and glibc stubs.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
source "$here/portable.sh"
cd "$here/.."
require_rust

arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(x86_64 aarch64)
version="$(cargo pkgid -p envgen)"
version="${version##*[#@]}"
# The tarballs' timestamps: the commit's, as build.rs takes the build date.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

# No debug information and no symbol table: the binary a user downloads is
# what runs, about a third of an unstripped release build.
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_PROFILE_RELEASE_STRIP=symbols

mkdir -p dist
for arch in "${arches[@]}"; do
  case "$arch" in
    x86_64 | aarch64) ;;
    *)
      log "unknown architecture '$arch' (x86_64 or aarch64)"
      exit 2
      ;;
  esac
  triple="$arch-unknown-linux-gnu"
  name="envgen-$version-$arch-linux-gnu"
  started=$SECONDS
  log "release: building $name (glibc >= $PORTABLE_GLIBC)"
  portable_build "$triple" target/release-dist --release
  portable_check "target/release-dist/$triple/release"
  stage="target/release-dist/stage/$name"
  rm -rf "$stage"
  mkdir -p "$stage"
  cp "target/release-dist/$triple/release/envgen" README.md "$stage/"
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    -C "$(dirname "$stage")" -cf - "$name" | gzip -9 -n >"dist/$name.tar.gz"
  log "release: dist/$name.tar.gz ($(stat -c %s "$stage/envgen") bytes stripped, $((SECONDS - started)) s)"
done

(cd dist && sha256sum -- envgen-*.tar.gz >SHA256SUMS)
log "release: dist/SHA256SUMS"
