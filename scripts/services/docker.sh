# A private Docker daemon for the tests (sourced by scripts/test.sh).
#
# Own data root and pidfile under $ENVGEN_TEST_STATE, own exec root and unix
# socket under /tmp/envgen-dockerd-HASH, so a developer's own daemon (and its
# images) are never touched. The sandbox
# this runs in has no iptables and no bridge: containers get `--bridge=none`,
# and envgen builds use host networking for RUN steps (apt can still reach the
# mirror). The storage driver is overlay2 when the kernel allows it, else vfs.
#
# The socket belongs to the `docker` group (created if missing), so the tests
# can run envgen as an unprivileged user in that group. No registry is
# reachable here, so the pinned `debian:bookworm-slim@sha256:…` cannot be
# pulled: ENVGEN_BASE_STAND_IN lets envgen build on the test's local stand-in
# tagged `debian:bookworm-slim` (tests/it/common/docker_base.rs), loudly and with a label;
# a user's machine without it pulls the pinned digest.

# The socket and exec root (containerd's sockets) live under a short /tmp
# path named after the state directory: unix socket paths are limited to
# 108 bytes, which a deep checkout path would exceed.
docker_run_dir() {
  printf '/tmp/envgen-dockerd-%s' "$(printf '%s' "$ENVGEN_TEST_STATE/docker" | sha256sum | cut -c1-12)"
}

docker_start() {
  # docker.io for the daemon (and a CLI for debugging); the image tests also
  # need debootstrap (they make their own base image) and charliecloud (export).
  apt_install docker.io debootstrap charliecloud curl
  getent group docker >/dev/null || groupadd --system docker
  export ENVGEN_BASE_STAND_IN="debian:bookworm-slim"
  local state="$ENVGEN_TEST_STATE/docker"
  local run_dir
  run_dir="$(docker_run_dir)"
  mkdir -p "$state/data" "$run_dir/exec"
  # Other users reach the socket through the docker group (the socket's own mode).
  chmod 0755 "$run_dir"
  local sock="$run_dir/docker.sock"
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
    --exec-root "$run_dir/exec" \
    --pidfile "$state/dockerd.pid" \
    --host "unix://$sock" \
    --group docker \
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
  stop_pidfile "$ENVGEN_TEST_STATE/docker/dockerd.pid"
  # dockerd leaves its default network namespace mounted in the exec root.
  umount "$(docker_run_dir)/exec/netns/default" 2>/dev/null || true
}
