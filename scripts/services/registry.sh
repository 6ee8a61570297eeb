# A loopback OCI registry for the tests (sourced by scripts/test.sh): the
# Debian `docker-registry` (distribution 2.8) with our own config — no auth,
# storage under $ENVGEN_TEST_STATE, listening on 127.0.0.1 only. dockerd
# treats 127.0.0.0/8 as an insecure registry by default, so plain HTTP works.

registry_start() {
  apt_install docker-registry curl
  local state="$ENVGEN_TEST_STATE/registry"
  local port="${ENVGEN_TEST_REGISTRY_PORT:-5055}"
  mkdir -p "$state/storage"
  if [ -f "$state/registry.pid" ] && kill -0 "$(cat "$state/registry.pid")" 2>/dev/null; then
    export ENVGEN_TEST_REGISTRY="127.0.0.1:$port"
    log "registry: reusing the loopback registry at $ENVGEN_TEST_REGISTRY"
    return 0
  fi
  cat >"$state/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $state/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML
  docker-registry serve "$state/config.yml" >"$state/registry.log" 2>&1 &
  echo $! >"$state/registry.pid"
  if wait_until 40 0.25 curl -fsS "http://127.0.0.1:$port/v2/"; then
    export ENVGEN_TEST_REGISTRY="127.0.0.1:$port"
    log "registry: up at $ENVGEN_TEST_REGISTRY"
    return 0
  fi
  log "registry: no answer on 127.0.0.1:$port; last log lines:"
  tail -n 20 "$state/registry.log" >&2 || true
  return 3
}

registry_stop() {
  local state="$ENVGEN_TEST_STATE/registry"
  [ -f "$state/registry.pid" ] || return 0
  local pid
  pid="$(cat "$state/registry.pid")"
  kill -0 "$pid" 2>/dev/null && kill -TERM "$pid"
  rm -f "$state/registry.pid"
}
