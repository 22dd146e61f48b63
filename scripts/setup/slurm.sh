#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine (Debian's slurm-wlm 22.05 + munge), for the SLURM
# integration tests (tests/test_slurm.py) and for trying `cluster.type: slurm` by hand.
#
# Idempotent and safe to call repeatedly (and concurrently: a lock serialises callers): installs
# the packages only when missing, writes /etc/slurm/slurm.conf only when its content would change,
# starts munged, slurmctld and slurmd only when they are not running, then waits until the node
# takes jobs. There is no systemd here, so the daemons are started directly (RECIPES.md, "A real
# SLURM cluster on one machine"). Run as root. Stop everything with `scontrol shutdown` (slurmctld
# and slurmd), then `kill $(cat /run/munge/munged.pid)`.
#
# Prints one last line: where the config lives, the partition and the node.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
PARTITION=debug
MARKER="# written by shardeval scripts/setup/slurm.sh"

say() { echo "slurm.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts system daemons)"

exec 9>/run/shardeval-slurm-setup.lock
flock -w 600 9 || die "another slurm.sh has held /run/shardeval-slurm-setup.lock for 10 minutes"

# --- packages -----------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
  say "installing slurm-wlm and munge (apt)"
  # Keep package scripts from starting daemons with a default config; we start them below.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt_log=$(mktemp)
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >>"$apt_log" 2>&1; }
  ok=1
  apt_install || { apt-get update -q >>"$apt_log" 2>&1 && apt_install; } || ok=0
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  if [ "$ok" = 0 ]; then tail -20 "$apt_log" >&2; rm -f "$apt_log"; die "apt-get install slurm-wlm munge failed"; fi
  rm -f "$apt_log"
fi

# --- munge --------------------------------------------------------------------------------------
munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
  install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged --force 9>&- || true  # daemons must not inherit the lock
  for _ in $(seq 50); do munge_ok && break; sleep 0.2; done
  munge_ok || die "munged does not answer (see /var/log/munge/munged.log)"
fi

# --- slurm.conf ---------------------------------------------------------------------------------
node=$(hostname -s)
cpus=$(nproc)
total_mb=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)
[ -n "$total_mb" ] || total_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
mem_mb=$(( total_mb > 4096 ? total_mb - 1024 : total_mb * 3 / 4 ))  # headroom for the OS

new_conf=$(cat <<EOF
$MARKER (one node; daemons talk over 127.0.0.1; rerun it to repair)
ClusterName=shardeval
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Test-cluster latency: look at pending jobs (dependencies, requeued tasks) every few seconds.
SchedulerParameters=sched_interval=2,sched_min_interval=100000
KillWait=15
# A requeued task may start again only once its credential expired (cred_expire + 1 s; SLURM's
# default 120 s): short here, so a self-requeued task comes back within a test's patience.
AuthInfo=cred_expire=20
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
)

changed=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$new_conf" ]; then
  if [ -f "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    cp -p "$CONF" "$CONF.before-shardeval"
    say "kept the previous $CONF as $CONF.before-shardeval"
  fi
  install -d -m 0755 "$CONF_DIR"
  printf '%s\n' "$new_conf" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
  changed=1
  say "wrote $CONF"
fi
install -d -m 0755 /var/spool/slurmctld /var/spool/slurmd /var/log/slurm

# --- daemons ------------------------------------------------------------------------------------
alive() {  # alive PIDFILE: the process it names runs (a zombie, which nothing may reap here, does not count)
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  case "$(sed 's/.*) //' "/proc/$pid/stat" | cut -c1)" in Z|X) return 1 ;; *) return 0 ;; esac
}
ctld_up() { scontrol ping 2>/dev/null | grep -q "is UP"; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what did not happen within ${secs}s (logs: /var/log/slurm/)"
    sleep 0.5
  done
}

if [ "$changed" = 1 ] && ctld_up; then
  say "config changed: restarting slurmctld and slurmd (scontrol shutdown)"
  scontrol shutdown >/dev/null 2>&1 || true
  wait_for 60 "slurmctld and slurmd stopping" eval '! alive /run/slurmctld.pid && ! alive /run/slurmd.pid'
fi
if ! ctld_up; then
  if alive /run/slurmctld.pid; then
    wait_for 30 "the running slurmctld answering" ctld_up
  else
    say "starting slurmctld"
    /usr/sbin/slurmctld 9>&-
    wait_for 30 "slurmctld answering scontrol ping" ctld_up
  fi
fi
if ! alive /run/slurmd.pid; then
  say "starting slurmd"
  /usr/sbin/slurmd 9>&-
fi

node_state() { sinfo -h -N -n "$node" -o %T 2>/dev/null | head -1; }
node_ready() { case "$(node_state)" in idle*|mixed*|allocated*|completing*) return 0 ;; *) return 1 ;; esac; }
deadline=$(( $(date +%s) + 60 ))
until node_ready; do
  state=$(node_state)
  case "$state" in
    down*|drain*|fail*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  [ "$(date +%s)" -lt "$deadline" ] || die "node $node is '$state', not idle, after 60s (logs: /var/log/slurm/)"
  sleep 0.5
done

echo "slurm: ready; config $CONF, partition $PARTITION, node $node ($cpus CPUs, ${mem_mb} MB), state $(node_state)"
