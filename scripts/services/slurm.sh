# A private one-node Slurm cluster for the tests: munged + slurmctld + slurmd
# with their own config, sockets, ports and state under $ENVGEN_TEST_STATE/slurm,
# so a real cluster's config on this machine is never read or touched.
# Exports SLURM_CONF (every Slurm client reads it) and ENVGEN_TEST_SLURM=1.

slurm_start() {
  # charliecloud-runtime: jobs that run envgen inside ch-run (tests/it/places/run_slurm.rs).
  apt_install slurm-wlm munge charliecloud-runtime
  local dir="$ENVGEN_TEST_STATE/slurm"
  local node cpus mem
  # Ports of our own (override to run two test clusters on one machine).
  local port="${ENVGEN_SLURM_PORT:-16817}"
  node="$(hostname -s)"
  cpus="$(nproc)"
  # Leave headroom: slurmd refuses a node whose RealMemory exceeds what it sees.
  mem=$(( $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) * 9 / 10 ))
  slurm_stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  mkdir -p "$dir"/{ctld,spool,log,munge}
  chmod 700 "$dir/munge"

  # munge: a key of our own, a socket of our own.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  /usr/sbin/munged --force \
    --key-file="$dir/munge/munge.key" \
    --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"

  cat >"$dir/slurm.conf" <<CONF
ClusterName=envgen-test
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Keep finished jobs visible to scontrol/squeue long enough for the tests.
MinJobAge=600
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -f "$SLURM_CONF"
  /usr/sbin/slurmd -f "$SLURM_CONF"

  local i
  for i in $(seq 1 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      export ENVGEN_TEST_SLURM=1
      log "slurm ready: $(sinfo -h -o '%P %D %T %c')"
      return 0
    fi
    sleep 1
  done
  log "slurm did not become ready; logs in $dir/log"
  tail -n 20 "$dir"/log/*.log >&2 || true
  return 1
}

slurm_stop() {
  local dir="$ENVGEN_TEST_STATE/slurm" pidfile pid
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}
