#!/usr/bin/env bash
# Provision and start a one-host Slurm cluster on a Debian bookworm host, for CI.
#
# Bookworm's own packages: slurm-wlm 22.05 (slurmctld, slurmd, slurm-client), slurmdbd with
# MariaDB for accounting (so `sacct` reports a finished job's State: COMPLETED, FAILED, ...),
# and munge. There is no systemd: every daemon is started directly, with its pid file and log
# under one state directory. One node, `localhost` (127.0.0.1, so no name resolution is
# needed), with CPUs=2 and partition `ci`: `sbatch --nodes=1 --ntasks=2` runs two tasks on it.
# No cgroups: proctrack/linuxproc, task/none, jobacct_gather/linux. Idempotent: a running
# cluster, or any daemon of it that still runs, is reused.
#
#   .ci/slurm.sh          install if needed, start what does not run, wait until the node is idle
#   .ci/slurm.sh stop     cancel jobs, stop slurmd, slurmctld, slurmdbd, mariadbd, munged (by pid file)
#   .ci/slurm.sh status   exit 0 when `sinfo` answers
#
# Environment: MCORE_SLURM_STATE (state directory, default /var/lib/mcore-images-slurm),
# MCORE_SLURM_CLUSTER (ClusterName, default mcore-ci), MCORE_SLURM_CPUS (default 2),
# MCORE_SLURM_DB_PORT (MariaDB's port on 127.0.0.1, default 3306).
# The configuration goes to /etc/slurm (slurm.conf, slurmdbd.conf), where the Slurm commands
# look without SLURM_CONF; the script refuses to overwrite files there that it did not write.
set -euo pipefail
# shellcheck source=.ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" slurm  # log, die, install_host_packages

STATE="${MCORE_SLURM_STATE:-/var/lib/mcore-images-slurm}"
CLUSTER="${MCORE_SLURM_CLUSTER:-mcore-ci}"
CPUS="${MCORE_SLURM_CPUS:-2}"
DB_PORT="${MCORE_SLURM_DB_PORT:-3306}"
NODE=localhost
PARTITION=ci
CONF_DIR=/etc/slurm
MARKER="# written by .ci/slurm.sh"
DB_DIR="$STATE/mariadb"
DB_SOCK="$DB_DIR/mysqld.sock"
MUNGE_DIR="$STATE/munge"
MUNGE_KEY=/etc/munge/munge.key
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
# Process names, in stop order (start is the reverse); each has a pid file and a log beside it.
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)


pidfile() {
  case "$1" in
    mariadbd) echo "$DB_DIR/mariadbd.pid" ;;
    munged) echo "$MUNGE_DIR/munged.pid" ;;
    *) echo "$STATE/$1.pid" ;;
  esac
}
logfile() { local p; p="$(pidfile "$1")"; echo "${p%.pid}.log"; }
no_jobs() { [[ -z "$(timeout 20 squeue -h -o %A 2>/dev/null)" ]]; }
# A live process of that name under the pid in its pid file (a stale file's pid may have been reused).
pid_is() { [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]] && ! grep -q '^State:.*zombie' "/proc/$1/status" 2>/dev/null; }
running() { local p; p="$(pidfile "$1")"; [[ -f "$p" ]] && pid_is "$(cat "$p")" "$1"; }

# sinfo retries a refused connection for a while; bound it.
sinfo_answers() { timeout 20 sinfo -h >/dev/null 2>&1; }
node_state() { timeout 20 sinfo -h -N -n "$NODE" -o %T 2>/dev/null || true; }

wait_for() { # wait_for SECONDS WHAT COMMAND...: poll COMMAND every half second
  local secs="$1" what="$2" t0=$SECONDS
  shift 2
  while ((SECONDS - t0 < secs)); do
    "$@" >/dev/null 2>&1 && { log "$what after $((SECONDS - t0))s"; return 0; }
    sleep 0.5
  done
  return 1
}

fail_with_log() { # fail_with_log DAEMON MESSAGE
  tail -n 20 "$(logfile "$1")" >&2 2>/dev/null || true
  die "$2; the log above names the cause ($(logfile "$1"))"
}


write_conf() { # write_conf PATH MODE: stdin to PATH, unless PATH exists and was not written here
  if [[ -e "$1" ]] && ! grep -qF "$MARKER" "$1"; then
    die "$1 exists and was not written by $0; move it away to let this script configure Slurm"
  fi
  local tmp
  tmp="$(mktemp "$1.XXXXXX")"
  cat >"$tmp"
  chmod "$2" "$tmp"
  mv -f "$tmp" "$1"
}

db_password() {
  local f="$STATE/slurmdbd.pass"
  [[ -s "$f" ]] || (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$f")
  cat "$f"
}

configure() {
  mkdir -p "$CONF_DIR" "$STATE/slurmctld" "$STATE/slurmd"
  chmod 755 "$STATE"
  write_conf "$CONF_DIR/slurm.conf" 644 <<CONF
$MARKER: a one-host CI cluster; state, pid files and logs in $STATE
ClusterName=$CLUSTER
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$(pidfile slurmctld)
SlurmdPidFile=$(pidfile slurmd)
SlurmctldLogFile=$(logfile slurmctld)
SlurmdLogFile=$(logfile slurmd)
SlurmctldDebug=info
SlurmdDebug=info
# No systemd, no cgroups: track a job's processes through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NODE
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
# A node that went down (e.g. slurmd stopped with the cluster) comes back when slurmd registers;
# the configured CPUs count even where the machine has another core count.
ReturnToService=2
SlurmdParameters=config_overrides
# Seconds between SIGTERM and SIGKILL when a job or step is ended.
KillWait=5
# sbatch --wait polls after 2 s, then stretches its poll to 8 s and 32 s while that stays below
# MinJobAge/2: with the default 300 a 20 s job returns after 42 s; with 5 it polls every 2 s.
# A finished job leaves squeue/scontrol 5-65 s after it ends (sacct keeps it); 2 (the minimum)
# would risk sbatch --wait missing the job and exiting 0.
MinJobAge=5
InactiveLimit=0
# No mail on this host; the default /bin/mail is absent and slurmctld would log an error.
MailProg=/bin/true
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
  # slurmdbd refuses a slurmdbd.conf that others can read (it holds the database password).
  write_conf "$CONF_DIR/slurmdbd.conf" 600 <<CONF
$MARKER
AuthType=auth/munge
DbdHost=$NODE
SlurmUser=root
PidFile=$(pidfile slurmdbd)
LogFile=$(logfile slurmdbd)
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(db_password)
StorageLoc=slurm_acct_db
CONF
}

start_munged() {
  if running munged; then log "munged already running (pid $(cat "$(pidfile munged)"))"; return 0; fi
  if [[ ! -s "$MUNGE_KEY" ]]; then
    log "generating $MUNGE_KEY"
    mungekey --create --keyfile="$MUNGE_KEY"
  fi
  # munged checks ownership and modes: key 0400 and its folders owned by munge, not writable by others.
  chown munge:munge "$MUNGE_KEY" /etc/munge && chmod 0400 "$MUNGE_KEY" && chmod 0700 /etc/munge
  # /run/munge (the socket's folder) is made by systemd-tmpfiles elsewhere; here /run starts empty.
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge "$MUNGE_DIR"
  # --force: a socket left by a munged that was killed does not stop a new one.
  runuser -u munge -- munged --force --pid-file="$(pidfile munged)" --log-file="$(logfile munged)" \
    </dev/null >/dev/null 2>&1 || fail_with_log munged "munged did not start"
  wait_for 10 "munged answers" bash -c 'munge -n | unmunge' || fail_with_log munged "munge -n | unmunge fails"
}

db() { mariadb --no-defaults --protocol=socket --socket="$DB_SOCK" -u root "$@"; }
db_answers() { db -e 'SELECT 1'; }

start_mariadb() {
  if running mariadbd; then log "mariadbd already running (pid $(cat "$(pidfile mariadbd)"))"; return 0; fi
  install -d -o mysql -g mysql -m 0750 "$DB_DIR"
  cat >"$DB_DIR/my.cnf" <<CNF
[mysqld]
datadir=$DB_DIR/data
socket=$DB_SOCK
pid-file=$(pidfile mariadbd)
log-error=$(logfile mariadbd)
bind-address=127.0.0.1
port=$DB_PORT
skip-name-resolve
# slurmdbd logs "Database settings not recommended values" below these (Slurm's accounting guide).
innodb_buffer_pool_size=1G
innodb_lock_wait_timeout=900
innodb_log_file_size=64M
CNF
  if [[ ! -d "$DB_DIR/data/mysql" ]]; then
    log "initialising MariaDB in $DB_DIR/data"
    mariadb-install-db --defaults-file="$DB_DIR/my.cnf" --user=mysql --skip-test-db \
      --auth-root-authentication-method=socket >"$DB_DIR/install-db.log" 2>&1 \
      || { tail -n 20 "$DB_DIR/install-db.log" >&2; die "mariadb-install-db failed ($DB_DIR/install-db.log)"; }
  fi
  log "starting mariadbd $(mariadbd --version | awk '{print $3}')"
  setsid mariadbd --defaults-file="$DB_DIR/my.cnf" --user=mysql </dev/null >>"$(logfile mariadbd)" 2>&1 &
  wait_for 60 "mariadbd answers" db_answers || fail_with_log mariadbd "mariadbd did not answer within 60 s"
  local pass
  pass="$(db_password)"
  db <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

start_slurm_daemon() { # start_slurm_daemon NAME WAIT_SECONDS ARGS...: the daemon forks and writes its pid file
  local name="$1" secs="$2"
  shift 2
  if running "$name"; then log "$name already running (pid $(cat "$(pidfile "$name")"))"; return 0; fi
  log "starting $name"
  "$name" "$@" </dev/null >/dev/null 2>&1 || fail_with_log "$name" "$name did not start"
  wait_for "$secs" "$name runs" running "$name" || fail_with_log "$name" "$name wrote no live pid file within ${secs}s"
}

register_cluster() {
  # slurmdbd creates its tables on the first start; sacctmgr answers once it listens.
  wait_for 120 "slurmdbd answers" sacctmgr -n -P list cluster \
    || fail_with_log slurmdbd "slurmdbd did not answer sacctmgr within 120 s"
  if ! sacctmgr -n -P list cluster format=Cluster | grep -qxF "$CLUSTER"; then
    log "registering cluster $CLUSTER with slurmdbd"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
}

wait_node_idle() {
  local t0=$SECONDS state=""
  while ((SECONDS - t0 < 60)); do
    state="$(node_state)"
    # Busy states only where a reused slurmctld still has jobs; a fresh cluster has none.
    case "$state" in
      idle | mixed | allocated | completing)
        log "node $NODE $state after $((SECONDS - t0))s: $(sinfo -V)"
        return 0
        ;;
    esac
    sleep 1
  done
  timeout 20 sinfo -R >&2 || true
  fail_with_log slurmd "node $NODE is '${state:-unknown}', not idle, after 60 s"
}

start_cluster() {
  local t0=$SECONDS state
  # Without a live slurmctld of ours, skip the probe: a refused sinfo takes ~9 s to give up.
  if running slurmctld && sinfo_answers; then
    state="$(node_state)"
    case "$state" in
      idle | mixed | allocated | completing)
        log "cluster already running: node $NODE $state"
        return 0
        ;;
    esac
  fi
  configure
  start_munged
  start_mariadb
  start_slurm_daemon slurmdbd 30
  register_cluster
  start_slurm_daemon slurmctld 30
  wait_for 30 "slurmctld answers" sinfo_answers || fail_with_log slurmctld "slurmctld did not answer sinfo within 30 s"
  start_slurm_daemon slurmd 30 -N "$NODE"
  wait_node_idle
  log "cluster $CLUSTER ready in $((SECONDS - t0))s"
}

stop_daemon() {
  local name="$1" p pid t0=$SECONDS
  p="$(pidfile "$name")"
  [[ -f "$p" ]] || { log "no pid file at $p: $name not stopped"; return 0; }
  pid="$(cat "$p")"
  if ! pid_is "$pid" "$name"; then
    log "$name (pid $pid from $p) does not run; pid file removed"
    rm -f "$p"
    return 0
  fi
  kill "$pid"
  for _ in $(seq 1 150); do pid_is "$pid" "$name" || break; sleep 0.2; done
  if pid_is "$pid" "$name"; then
    log "$name (pid $pid) still runs 30 s after SIGTERM: SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$p"
  log "stopped $name (pid $pid) in $((SECONDS - t0))s"
}

stop_cluster() {
  # Jobs first, so that no slurmstepd or task outlives slurmd.
  if running slurmctld && sinfo_answers; then
    local jobs
    jobs="$(timeout 20 squeue -h -o %A 2>/dev/null | tr '\n' ' ')"
    if [[ -n "${jobs// /}" ]]; then
      log "cancelling jobs: $jobs"
      # shellcheck disable=SC2086 # one job id per word
      scancel $jobs || true
      wait_for 30 "jobs ended" no_jobs || log "jobs still listed after 30 s"
    fi
  fi
  local name
  for name in "${DAEMONS[@]}"; do stop_daemon "$name"; done
}

case "${1:-start}" in
  start)
    install_host_packages "${PACKAGES[@]}"
    start_cluster
    ;;
  stop) stop_cluster ;;
  status) sinfo_answers ;;
  *) die "unknown command '$1'; use start, stop or status" ;;
esac
