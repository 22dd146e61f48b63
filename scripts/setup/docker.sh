#!/usr/bin/env bash
# A real Docker engine for tests/test_docker.py, installed nowhere system-wide: Debian's docker.io,
# containerd, runc and tini fetched with `apt-get download` and unpacked with `dpkg-deb -x` under
# ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/docker, a dockerd with its own data root, exec
# root, socket, pidfile and config file, and a base image (no registry is reachable here):
# `debootstrap --variant=minbase --include=python3 bookworm`, tarred once into the cache and
# `docker import`ed.
#
#   docker.sh [setup]  what scripts/test.sh runs: prepare everything, leave the daemon as it was
#                      (it is started for the base image and stopped again if this started it)
#   docker.sh start    prepare, then leave the daemon running (the tests' session fixture)
#   docker.sh stop     stop the daemon and everything it started; nothing of it keeps running
#   docker.sh status   exit 0 when the daemon answers
#
# Writes $CACHE/docker/env (read by the tests): SHARDEVAL_DOCKER_HOST, SHARDEVAL_DOCKER_PATH (the
# unpacked bin folders), SHARDEVAL_DOCKER_BASE (the imported image), SHARDEVAL_DOCKER_STORAGE; or,
# where the engine cannot run, SHARDEVAL_DOCKER_UNAVAILABLE=<why> (one line, also printed; exit 0,
# and the tests skip with that reason). Idempotent and locked. Cold: 2-3 minutes on 2 cores (65 MB
# of packages; debootstrap, then the 150 MB root tarred into the cache); warm: about 4 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}
D=$CACHE/docker
PKGROOT=$D/pkgroot                       # the unpacked packages
DATA_ROOT=$D/data                        # images and build cache survive between runs
RUN_DIR=${SHARDEVAL_DOCKER_RUN:-/run/shardeval-docker}
EXEC_ROOT=$RUN_DIR/exec                  # short: containerd's sockets live here
SOCK=$RUN_DIR/docker.sock
PIDFILE=$RUN_DIR/dockerd.pid
LOG=$D/dockerd.log
ENV_FILE=$D/env
ROOTFS_TAR=$D/rootfs-amd64-bookworm-minbase-python3.tar
BASE_IMAGE=shardeval-ci/debian-python3:bookworm
PACKAGES=(docker.io containerd runc tini)
BIN_PATH=$PKGROOT/usr/bin:$PKGROOT/usr/sbin
DOCKER=("$PKGROOT/usr/bin/docker" -H "unix://$SOCK")

say() { echo "docker.sh: $*" >&2; }

unavailable() {  # unavailable WHY: one line, an env file that makes the tests skip, exit 0
  say "Docker engine unavailable: $*"
  { mkdir -p "$D" && printf 'SHARDEVAL_DOCKER_UNAVAILABLE=%s\n' "$*" >"$ENV_FILE"; } 2>/dev/null || true
  exit 0
}

alive() {  # alive PID: running (a zombie does not count)
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 1
  case "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" in Z|X) return 1 ;; *) return 0 ;; esac
}
daemon_pid() { local pid; pid=$(cat "$PIDFILE" 2>/dev/null) || return 1; alive "$pid" && echo "$pid"; }
answers() { "${DOCKER[@]}" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ours() {  # pids of processes running a binary from $PKGROOT (dockerd, containerd, shims, runc)
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in "$PKGROOT"/*) echo "${p#/proc/}" ;; esac
  done
}

stop_daemon() {
  local pid deadline p
  if pid=$(daemon_pid); then
    kill -TERM "$pid"
    deadline=$(( $(date +%s) + 40 ))  # dockerd gives running containers 15 s, then kills them
    while alive "$pid" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
    if alive "$pid"; then say "dockerd $pid ignored SIGTERM for 40 s: killing it"; kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  # containerd and shims normally leave with dockerd; anything of ours still here is ended by pid
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -n "$(ours)" ] || break
    sleep 0.3
  done
  for p in $(ours); do say "ending leftover $(readlink "/proc/$p/exe" 2>/dev/null) (pid $p)"; kill -KILL "$p" 2>/dev/null || true; done
  # mounts a killed daemon left behind would keep the next one from using the data root
  awk -v a="$DATA_ROOT" -v b="$EXEC_ROOT" '$2 == a || $2 == b || index($2, a "/") == 1 || index($2, b "/") == 1 {print $2}' /proc/self/mounts | sort -r \
    | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -f "$PIDFILE" "$SOCK"
}

start_daemon() {  # start_daemon DRIVER: 0 when it answers with that storage driver
  local driver=$1 deadline child
  mkdir -p "$RUN_DIR" "$EXEC_ROOT" "$DATA_ROOT"
  echo '{}' >"$D/daemon.json"  # never /etc/docker/daemon.json
  echo "== $(date -u +%FT%TZ) dockerd --storage-driver $driver" >>"$LOG"
  # Its own session (setsid), so it outlives this script and no caller's process group signals it;
  # no inherited lock descriptor.
  PATH="$BIN_PATH:$PATH" setsid -w "$PKGROOT/usr/sbin/dockerd" \
    --config-file "$D/daemon.json" --data-root "$DATA_ROOT" --exec-root "$EXEC_ROOT" \
    -H "unix://$SOCK" --pidfile "$PIDFILE" --storage-driver "$driver" \
    --bridge=none --iptables=false --ip-masq=false --userland-proxy=false --log-level=warn \
    </dev/null >>"$LOG" 2>&1 9>&- &
  child=$!  # dockerd itself, or setsid waiting for it
  deadline=$(( $(date +%s) + 60 ))
  until answers; do
    if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
    alive "$child" || return 1  # it exited: no point waiting
    sleep 0.3
  done
  [ "$("${DOCKER[@]}" info --format '{{.Driver}}' 2>/dev/null)" = "$driver" ]
}

# --- what can be done without root ---------------------------------------------------------------
cmd=${1:-setup}
case "$cmd" in
  setup|start|stop|status) ;;
  *) echo "usage: bash scripts/setup/docker.sh [setup|start|stop|status]" >&2; exit 2 ;;
esac
if [ "$cmd" = status ]; then
  [ -x "${DOCKER[0]}" ] && answers && { echo "docker.sh: dockerd $(daemon_pid || echo '?') answers on $SOCK"; exit 0; }
  echo "docker.sh: no daemon answers on $SOCK"; exit 1
fi
if [ "$(id -u)" != 0 ]; then
  [ "$cmd" = stop ] && exit 0
  unavailable "not root (dockerd needs root here: mounts, namespaces, cgroups)"
fi
if [ "$cmd" = stop ]; then
  mkdir -p "$D"
  exec 9>"$D/.lock"
  flock -w 120 9 || { say "another docker.sh holds $D/.lock"; exit 1; }
  stop_daemon
  say "stopped"
  exit 0
fi
[ "$(uname -m)" = x86_64 ] || unavailable "this script fetches amd64 packages; this machine is $(uname -m)"

mkdir -p "$D"
exec 9>"$D/.lock"
flock -w 900 9 || { say "another docker.sh has held $D/.lock for 15 minutes"; exit 1; }

# --- packages: apt-get download + dpkg-deb -x, nothing installed ---------------------------------
if [ ! -f "$PKGROOT/.complete" ]; then
  command -v apt-get >/dev/null || unavailable "no apt-get to fetch Debian's docker.io, containerd, runc, tini"
  say "fetching ${PACKAGES[*]} (apt-get download, about 65 MB) and unpacking them into $PKGROOT"
  rm -rf "$D/debs" "$PKGROOT"
  mkdir -p "$D/debs" "$PKGROOT"
  # (apt warns that its sandbox user cannot write into a root-only folder, and downloads anyway)
  if ! (cd "$D/debs" && apt-get download -q "${PACKAGES[@]}" >/dev/null 2>"$D/apt.log"); then
    apt-get update -q >>"$D/apt.log" 2>&1 || true
    (cd "$D/debs" && apt-get download -q "${PACKAGES[@]}" >/dev/null 2>>"$D/apt.log") \
      || unavailable "apt-get download ${PACKAGES[*]} failed (see $D/apt.log)"
  fi
  for deb in "$D"/debs/*.deb; do
    dpkg-deb -x "$deb" "$PKGROOT"
    dpkg-deb -W --showformat='${Package}=${Version}\n' "$deb" >>"$PKGROOT/.versions"
  done
  mv "$PKGROOT/.versions" "$PKGROOT/.complete"
  rm -rf "$D/debs"  # unpacked is all that is used
fi
for bin in usr/sbin/dockerd usr/bin/docker usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/sbin/runc usr/bin/docker-init; do
  [ -x "$PKGROOT/$bin" ] || unavailable "$PKGROOT/$bin missing after unpacking ${PACKAGES[*]}"
done

# --- the base image's root file system, made once -----------------------------------------------
if [ ! -s "$ROOTFS_TAR" ]; then
  if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap >/dev/null 2>>"$D/apt.log" \
      || unavailable "apt-get install debootstrap failed (see $D/apt.log)"
  fi
  say "debootstrap amd64 bookworm minbase + python3 (once, about a minute)"
  rm -rf "$D/rootfs.tmp"
  debootstrap --arch=amd64 --variant=minbase --include=python3 bookworm "$D/rootfs.tmp" \
    http://deb.debian.org/debian >"$D/debootstrap.log" 2>&1 \
    || { rm -rf "$D/rootfs.tmp"; unavailable "debootstrap failed (see $D/debootstrap.log)"; }
  # what an image never needs: apt's downloaded lists and packages, documentation
  rm -rf "$D/rootfs.tmp"/var/lib/apt/lists/* "$D/rootfs.tmp"/var/cache/apt/*.bin \
    "$D/rootfs.tmp"/var/cache/apt/archives/*.deb "$D/rootfs.tmp"/usr/share/doc/* "$D/rootfs.tmp"/usr/share/man/*
  tar -C "$D/rootfs.tmp" --numeric-owner --sort=name -cf "$ROOTFS_TAR.tmp" .
  sha256sum "$ROOTFS_TAR.tmp" | cut -d' ' -f1 >"$ROOTFS_TAR.sha256"
  mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  rm -rf "$D/rootfs.tmp"
fi
[ -s "$ROOTFS_TAR.sha256" ] || sha256sum "$ROOTFS_TAR" | cut -d' ' -f1 >"$ROOTFS_TAR.sha256"
ROOTFS_SHA=$(cat "$ROOTFS_TAR.sha256")

# --- the daemon ---------------------------------------------------------------------------------
was_running=0
driver=
if answers; then
  was_running=1
  driver=$("${DOCKER[@]}" info --format '{{.Driver}}')
else
  stop_daemon  # a stale pidfile, mounts or processes from a killed run
  if start_daemon overlay2; then
    driver=overlay2
  else
    why=$(grep -v '^==' "$LOG" | grep -iE 'level=(error|fatal)|overlay' | tail -1 | cut -c1-200)
    stop_daemon
    say "overlay2 does not work here (${why:-see $LOG}); falling back to vfs (slower, every layer a full copy)"
    if start_daemon vfs; then
      driver=vfs
    else
      why=$(grep -v '^==' "$LOG" | tail -1 | cut -c1-200)
      stop_daemon
      unavailable "dockerd did not start with overlay2 or vfs: ${why:-see $LOG}"
    fi
  fi
fi

# --- the base image -----------------------------------------------------------------------------
have=$("${DOCKER[@]}" image inspect --format '{{index .Config.Labels "org.shardeval.rootfs-sha256"}}' "$BASE_IMAGE" 2>/dev/null || true)
if [ "$have" != "$ROOTFS_SHA" ]; then
  say "importing $ROOTFS_TAR as $BASE_IMAGE"
  "${DOCKER[@]}" import --change "LABEL org.shardeval.rootfs-sha256=$ROOTFS_SHA" --change 'CMD ["python3"]' \
    "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null
fi
"${DOCKER[@]}" run --rm --network=none "$BASE_IMAGE" python3 -c 'import sys; assert sys.version_info >= (3, 10)' \
  || { [ "$was_running" = 1 ] || stop_daemon; unavailable "a container of $BASE_IMAGE does not run python3 (see $LOG)"; }

{
  echo "SHARDEVAL_DOCKER_HOST=unix://$SOCK"
  echo "SHARDEVAL_DOCKER_PATH=$BIN_PATH"
  echo "SHARDEVAL_DOCKER_BASE=$BASE_IMAGE"
  echo "SHARDEVAL_DOCKER_STORAGE=$driver"
} >"$ENV_FILE.tmp"
mv "$ENV_FILE.tmp" "$ENV_FILE"

version=$("${DOCKER[@]}" version --format '{{.Server.Version}}')
if [ "$cmd" = setup ] && [ "$was_running" = 0 ]; then
  stop_daemon
  echo "docker: ready (dockerd $version, $driver, base image $BASE_IMAGE; stopped again: the tests start it); env in $ENV_FILE"
else
  echo "docker: dockerd $version running on $SOCK ($driver, base image $BASE_IMAGE); env in $ENV_FILE"
fi
