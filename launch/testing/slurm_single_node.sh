#!/usr/bin/env bash
# launch/testing/slurm_single_node.sh — a real one-node SLURM cluster (slurmctld + slurmd + munge) on a Debian 12
# machine without systemd: what tests/test_launch_slurm.py submits a sweep to, and a way to try `python -m launch
# --backend=slurm` on a workstation. Needs root (munged and slurmd run as root); `.ci/run` installs the packages.
#
# Usage:
#   bash slurm_single_node.sh install   # apt-get install slurmctld slurmd slurm-client munge (idempotent)
#   bash slurm_single_node.sh start     # install if missing, write config under $SLURM_SN_DIR, start daemons
#   bash slurm_single_node.sh smoke     # sbatch --wrap, a 3-task job array and srun; fails if any fails
#   bash slurm_single_node.sh status    # which of our daemons run, sinfo, squeue
#   bash slurm_single_node.sh env       # prints `export SLURM_CONF=...` for clients (sbatch/squeue/srun)
#   bash slurm_single_node.sh stop      # cancel our jobs, stop only the daemons this script started (by pid)
#   bash slurm_single_node.sh --stop    # same as stop
#   bash slurm_single_node.sh all       # start, smoke, then stop (also when smoke fails)
#
# After `start`, clients need SLURM_CONF: eval "$(bash slurm_single_node.sh env)".
# Everything (config, munge key/socket, state, spool, logs, pid files, job output of `smoke`) lives under
# $SLURM_SN_DIR (default /tmp/slurm-sn). Daemons run as root in the foreground (-D / -F) in the background of
# this script; their pids are recorded in $SLURM_SN_DIR/pids/ and `stop` ends exactly those pids, after
# checking that each still is the process this script started (same executable, our config path).
#
# Knobs (environment): SLURM_SN_DIR, SLURM_SN_CTLD_PORT (default 6817), SLURM_SN_SLURMD_PORT (6818),
# SLURM_SN_TIMEOUT (seconds to wait for the node to come up / jobs to finish, default 120).
set -euo pipefail

DIR=${SLURM_SN_DIR:-/tmp/slurm-sn}
CTLD_PORT=${SLURM_SN_CTLD_PORT:-6817}
SLURMD_PORT=${SLURM_SN_SLURMD_PORT:-6818}
TMO=${SLURM_SN_TIMEOUT:-120}
case $DIR in /tmp/*[!/]*) ;; *) echo "SLURM_SN_DIR must be a directory under /tmp (got '$DIR')" >&2; exit 2 ;; esac
case /$DIR/ in */../*|*/./*) echo "SLURM_SN_DIR must not contain . or .. (got '$DIR')" >&2; exit 2 ;; esac
CONF=$DIR/etc/slurm.conf
MUNGE_SOCK=$DIR/munge/munge.socket.2
PIDS=$DIR/pids
NODE=$(hostname -s)
PACKAGES=(slurmctld slurmd slurm-client munge)

log() { printf '[slurm-sn %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
export SLURM_CONF=$CONF

have_bins() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null
}

do_install() {
  if have_bins; then log "packages already installed"; return 0; fi
  [ "$(id -u)" = 0 ] || die "install needs root"
  local t0=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -q >/dev/null || die "apt-get update failed"
  # policy-rc.d / no systemd: postinst scripts may try to start services and fail harmlessly.
  timeout 600 apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"${TMPDIR:-/tmp}/slurm-sn-apt.log" 2>&1 ||
    { tail -n 20 "${TMPDIR:-/tmp}/slurm-sn-apt.log" >&2 || true; die "apt-get install failed"; }
  have_bins || die "binaries missing after install"
  log "installed ${PACKAGES[*]} in $((SECONDS - t0))s: $(dpkg-query -W -f='${Package}=${Version} ' "${PACKAGES[@]}")"
}

# pid_ours NAME -> prints the recorded pid if that process is alive and still the one we started.
pid_ours() {
  local name=$1 f=$PIDS/$1.pid pid exe want
  [ -s "$f" ] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -d "/proc/$pid" ] || return 1
  case $name in munged|slurmctld|slurmd) ;; *) return 1 ;; esac
  # Debian's slurm binaries are alternatives symlinks (/usr/sbin/slurmctld -> slurmctld-wlm): compare
  # the running executable with the resolved binary
  want=$(readlink -f "$(command -v "$name")") || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  [ "$exe" = "$want" ] || return 1
  # our instance: its command line names a file under $DIR
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR/" || return 1
  echo "$pid"
}

# launch NAME OWN_PIDFILE CMD... : run CMD (a daemon kept in the foreground) in the background, in its own
# session and detached from our stdio, and record its pid in $PIDS/NAME.pid.
launch() {
  local name=$1 own=$2 pid i
  shift 2
  setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  # setsid execs in place (so $! is the daemon) unless it is a process-group leader, which a background
  # job is only under job control (set -m). Then it forks and $! exits at once: adopt the pid the daemon
  # writes to its own pid file instead (a fresh file: $DIR is wiped before start), after the same check.
  for i in $(seq 50); do
    [ -s "$own" ] && break
    sleep 0.1
  done
  if ! pid_ours "$name" >/dev/null && [ -s "$own" ]; then
    cp "$own" "$PIDS/$name.pid"
  fi
  pid_ours "$name" >/dev/null ||
    { tail -n 20 "$DIR/log/$name.out" >&2 || true; die "$name (pid $pid) did not start; see $DIR/log/$name.*"; }
  log "started $name pid $(<"$PIDS/$name.pid")"
}

write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  # RealMemory must not exceed what slurmd finds, or the node drains ("Low RealMemory"): take 90%.
  mem_mb=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  cat >"$CONF" <<EOF
# generated by launch/testing/slurm_single_node.sh — single node, no cgroups, no accounting database
ClusterName=sn
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
MaxArraySize=10001
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

wait_node_up() {
  local t0=$SECONDS st=""
  while [ $((SECONDS - t0)) -lt "$TMO" ]; do
    st=$(timeout 10 sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -1 || true)
    case $st in
      idle|mixed|allocated) log "node $NODE is $st after $((SECONDS - t0))s"; return 0 ;;  # no '*' (not responding)
      drain*|down*|fail*)
        # a first registration can race the controller; resume once
        timeout 10 scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  timeout 10 scontrol show node "$NODE" >&2 || true
  tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
  die "node $NODE not up after ${TMO}s (state: ${st:-none})"
}

do_start() {
  [ "$(id -u)" = 0 ] || die "start needs root (munged and slurmd run as root here)"
  do_install
  if pid_ours slurmctld >/dev/null || pid_ours slurmd >/dev/null || pid_ours munged >/dev/null; then
    die "already running under $DIR; run '$0 stop' first"
  fi
  local t0=$SECONDS
  rm -rf "$DIR"
  mkdir -p "$DIR"/{etc,munge,state,run,log,pids,jobs} "$DIR/spool/$NODE"
  chmod 711 "$DIR/munge"   # munged wants the socket's directory searchable by all, not writable
  # munge: a fresh key of our own, socket/pid/log/seed under $DIR. --force lets munged run as root
  # and accept a socket directory under world-writable /tmp.
  mungekey --create --keyfile="$DIR/munge/munge.key" --force >/dev/null 2>&1 ||
    { dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none; }
  chmod 400 "$DIR/munge/munge.key"
  launch munged "$DIR/munge/munged.pid" munged -F --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCK" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
  local i
  for i in $(seq 50); do [ -S "$MUNGE_SOCK" ] && break; sleep 0.1; done
  timeout 10 bash -c "munge -S '$MUNGE_SOCK' -n | unmunge -S '$MUNGE_SOCK'" >/dev/null ||
    die "munge self-test failed (see $DIR/log/munged.log)"
  write_conf
  launch slurmctld "$DIR/run/slurmctld.pid" slurmctld -D -i -f "$CONF"
  for i in $(seq 100); do timeout 5 scontrol ping 2>/dev/null | grep -q 'UP' && break; sleep 0.2; done
  launch slurmd "$DIR/run/slurmd-$NODE.pid" slurmd -D -N "$NODE" -f "$CONF"
  wait_node_up
  log "cluster up in $((SECONDS - t0))s; clients need: export SLURM_CONF=$CONF"
}

# wait_jobs JOBID... : poll squeue (no sacct: no accounting db) until none of the jobs is left in the queue.
wait_jobs() {
  local t0=$SECONDS left
  while [ $((SECONDS - t0)) -lt "$TMO" ]; do
    left=$(timeout 10 squeue -h -o '%i %T' -j "$(IFS=,; echo "$*")" 2>/dev/null |
      grep -Ev ' (COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|BOOT_FAIL|DEADLINE|PREEMPTED)$' || true)
    [ -z "$left" ] && return 0
    sleep 1
  done
  die "jobs $* not finished after ${TMO}s: $left"
}

# final state of a job from scontrol (kept MinJobAge seconds after it ends)
job_state() { timeout 10 scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | sort -u | tr '\n' ' '; }

do_smoke() {
  pid_ours slurmctld >/dev/null || die "not running; run '$0 start' first"
  local out=$DIR/jobs t0=$SECONDS j1 j2 fail=0 i
  cd "$out"
  j1=$(timeout 30 sbatch --parsable -J sn-wrap -o "$out/wrap-%j.out" --wrap 'hostname; echo ok') || die "sbatch failed"
  # shellcheck disable=SC2016  # $SLURM_ARRAY_TASK_ID is for the job's shell
  j2=$(timeout 30 sbatch --parsable -J sn-array -o "$out/array-%A_%a.out" --array=0-2 \
    --wrap 'echo $SLURM_ARRAY_TASK_ID') || die "sbatch --array failed"
  j1=${j1%%;*}; j2=${j2%%;*}
  log "submitted batch job $j1 and array job $j2"
  wait_jobs "$j1" "$j2"
  log "jobs finished after $((SECONDS - t0))s: $j1: $(job_state "$j1")| $j2: $(job_state "$j2")"
  if grep -qx ok "$out/wrap-$j1.out" && grep -qx "$NODE" "$out/wrap-$j1.out"; then
    log "batch job output OK: $(tr '\n' ' ' <"$out/wrap-$j1.out")"
  else
    log "batch job output wrong: $(cat "$out/wrap-$j1.out" 2>&1)"; fail=1
  fi
  for i in 0 1 2; do
    if [ "$(cat "$out/array-${j2}_$i.out" 2>/dev/null)" = "$i" ]; then
      log "array task $i output OK"
    else
      log "array task $i output wrong: $(cat "$out/array-${j2}_$i.out" 2>&1)"; fail=1
    fi
  done
  local s
  s=$(timeout 60 srun -n 1 echo hi 2>&1) || true
  if [ "$s" = hi ]; then log "srun -n 1 echo hi -> hi"; else log "srun output wrong: $s"; fail=1; fi
  [ $fail = 0 ] || die "smoke test failed"
  log "smoke test passed in $((SECONDS - t0))s"
}

do_status() {
  local n p
  for n in munged slurmctld slurmd; do
    if p=$(pid_ours "$n"); then echo "$n: running, pid $p"; else echo "$n: not running"; fi
  done
  if pid_ours slurmctld >/dev/null; then
    timeout 10 sinfo || true
    timeout 10 squeue || true
  fi
}

# stop_pid NAME : TERM the recorded pid if it is still ours, wait, then KILL that same pid.
stop_pid() {
  local name=$1 pid i
  pid=$(pid_ours "$name") || { rm -f "$PIDS/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  if [ -d "/proc/$pid" ] && [ "$(pid_ours "$name" || true)" = "$pid" ]; then
    log "$name pid $pid ignored TERM; killing"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # reap if it is our child (it is not when stop runs in another shell)
  wait "$pid" 2>/dev/null || true
  rm -f "$PIDS/$name.pid"
  log "stopped $name pid $pid"
}

do_stop() {
  if pid_ours slurmctld >/dev/null; then
    # end our jobs first so no slurmstepd of ours outlives slurmd
    local jobs i
    jobs=$(timeout 10 squeue -h -o '%A' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      log "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      timeout 10 scancel $jobs 2>/dev/null || true
      for i in $(seq 30); do
        [ -z "$(timeout 10 squeue -h -o '%A' -t PD,R,CG,CF,S 2>/dev/null || true)" ] && break
        sleep 1
      done
    fi
  fi
  stop_pid slurmd
  stop_pid slurmctld
  stop_pid munged
}

cmd=${1:-start}
case $cmd in
  install) do_install ;;
  start) do_start ;;
  smoke|test) do_smoke ;;
  status) do_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  stop|--stop) do_stop ;;
  all) do_start; trap do_stop EXIT; do_smoke ;;
  -h|--help|help) sed -n '2,22p' "$0" ;;
  *) die "unknown command '$cmd' (install|start|smoke|status|env|stop|all)" ;;
esac
