# Shared helpers for envgen's set-up scripts. Source it; do not run it.
set -euo pipefail

log() { printf '[envgen-setup] %s\n' "$*" >&2; }

# Install Debian packages that are missing (as root, or through sudo).
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing: ${missing[*]}"
  if [ ! -f /var/lib/envgen-apt-updated ]; then
    $sudo apt-get update -qq
    $sudo touch /var/lib/envgen-apt-updated 2>/dev/null || true
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A Rust toolchain new enough for the pinned dependencies.
require_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    log "cargo not found: install Rust >= 1.85 with rustup (https://rustup.rs), or use 'nix develop'"
    exit 3
  fi
}

# Poll a command until it succeeds: wait_until TRIES INTERVAL_S CMD ARGS...
# (returns 1 when it never did).
wait_until() {
  local tries="$1" interval="$2" i
  shift 2
  for ((i = 0; i < tries; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep "$interval"
  done
  return 1
}
