# A private Docker daemon for the tests (sourced by scripts/test.sh).
#
# Own data root, exec root, pidfile and unix socket under $ENVGEN_TEST_STATE,
# so a developer's own daemon (and its images) are never touched. The sandbox
# this runs in has no iptables and no bridge: containers get `--bridge=none`,
# and envgen builds use host networking for RUN steps (apt can still reach the
# mirror). The storage driver is overlay2 when the kernel allows it, else vfs.

docker_start() {
  # docker.io for the daemon (and a CLI for debugging); the image tests also
  # need debootstrap (they make their own base image) and charliecloud (export).
  apt_install docker.io debootstrap charliecloud curl
  local state="$ENVGEN_TEST_STATE/docker"
  mkdir -p "$state/data" "$state/exec"
  local sock="$state/docker.sock"
  if [ -S "$sock" ] && [ -f "$state/dockerd.pid" ] && kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null; then
    export DOCKER_HOST="unix://$sock" ENVGEN_TEST_DOCKER=1
    log "docker: reusing the private daemon at $DOCKER_HOST"
    return 0
  fi
  local driver="${ENVGEN_DOCKER_STORAGE_DRIVER:-}"
  if [ -z "$driver" ]; then
    driver=vfs
    # overlay2 only when an overlay mount works here (it does not inside overlayfs sandboxes).
    local probe="$state/overlay-probe"
    mkdir -p "$probe"/{lower,upper,work,merged}
    if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" 2>/dev/null; then
      umount "$probe/merged"
      driver=overlay2
    fi
    rm -rf "$probe"
  fi
  dockerd \
    --data-root "$state/data" \
    --exec-root "$state/exec" \
    --pidfile "$state/dockerd.pid" \
    --host "unix://$sock" \
    --storage-driver "$driver" \
    --iptables=false --ip-masq=false --bridge=none \
    >"$state/dockerd.log" 2>&1 &
  export DOCKER_HOST="unix://$sock"
  if wait_until 60 0.5 curl -fsS --unix-socket "$sock" http://localhost/_ping; then
    export ENVGEN_TEST_DOCKER=1
    log "docker: private daemon up at $DOCKER_HOST (storage driver $driver)"
    return 0
  fi
  log "docker: dockerd did not answer within 30 s; last log lines:"
  tail -n 20 "$state/dockerd.log" >&2 || true
  return 3
}

docker_stop() {
  local state="$ENVGEN_TEST_STATE/docker"
  [ -f "$state/dockerd.pid" ] || return 0
  local pid
  pid="$(cat "$state/dockerd.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    local i
    for i in $(seq 1 40); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
  fi
  rm -f "$state/dockerd.pid"
}
