#!/usr/bin/env bash
# A real Docker engine for tests/test_docker.py and Inspect's docker sandbox
# (tests/test_inspect_docker_sandbox.py), installed nowhere system-wide: Debian packages unpacked
# with `dpkg-deb -x` under ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/docker, a dockerd with
# its own data root, exec root, socket, pidfile and config file, and a base image (no registry is
# reachable here): `debootstrap --variant=minbase --include=python3 bookworm`, tarred once into the
# cache and `docker import`ed.
#
# Why trixie's engine on a bookworm machine: Inspect AI's docker sandbox refuses Docker Engine
# older than 24.0.6 and Compose older than 2.21.0 (`docker compose`, the v2 CLI plugin). Bookworm
# ships dockerd 20.10 and no Compose v2 at all. Trixie's docker.io 26.1, docker-cli, containerd
# 1.7, docker-compose 2.26 (the v2 plugin) and docker-buildx 0.13 need only glibc >= 2.34 (bookworm
# has 2.36), so they are fetched by exact URL from deb.debian.org, pinned by version and sha256
# below (the hashes are those of trixie's signed Packages index). runc and tini stay bookworm's
# (`apt-get download`): trixie's need glibc 2.38. The plugins are linked into $CACHE/docker/config/
# cli-plugins, the DOCKER_CONFIG that the env file names, so the docker CLI finds them without
# ~/.docker. When Debian supersedes a pinned version, its URL stops working: this says so in one
# line and fails; update TRIXIE_DEBS from the current Packages index.
#
#   docker.sh [setup]  what scripts/test.sh runs: prepare everything, leave the daemon as it was
#                      (it is started for the base image and stopped again if this started it)
#   docker.sh start    prepare, then leave the daemon running (the tests' session fixture)
#   docker.sh stop     stop the daemon and everything it started; nothing of it keeps running
#   docker.sh status   exit 0 when the daemon answers
#
# Writes $CACHE/docker/env (read by the tests): SHARDEVAL_DOCKER_HOST, SHARDEVAL_DOCKER_PATH (the
# unpacked bin folders), SHARDEVAL_DOCKER_CONFIG (a DOCKER_CONFIG holding the compose and buildx
# plugins), SHARDEVAL_DOCKER_BASE (the imported image), SHARDEVAL_DOCKER_STORAGE; or, where the
# engine cannot run, SHARDEVAL_DOCKER_UNAVAILABLE=<why> (one line, also printed; exit 0, and the
# tests skip with that reason). Idempotent and locked. Cold: about a minute on 2 cores (95 MB of
# packages; debootstrap, then the 150 MB root tarred into the cache); warm: about 3 s.
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
CONFIG_DIR=$D/config                     # DOCKER_CONFIG: cli-plugins/ links to the unpacked plugins
MIRROR=${SHARDEVAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}  # any mirror: the hashes decide
# trixie's engine, CLI and plugins: pool path (name_version_arch), sha256
TRIXIE_DEBS=(
  "pool/main/d/docker.io/docker.io_26.1.5+dfsg1-9+deb13u1+b1_amd64.deb 53ae1a99f15113f0a0d2226808ec0d24ee31b3b87b87ab8ec35be09a1a2ee13b"
  "pool/main/d/docker.io/docker-cli_26.1.5+dfsg1-9+deb13u1+b1_amd64.deb 596647bc4ffaaaf2e2321116b8a10f6a6086ada797c17a7117798cb391a72776"
  "pool/main/c/containerd/containerd_1.7.24~ds1-6+deb13u1_amd64.deb ed708deb96fe476a3bce4efa5c0538dfbcf717ab9a7c7944ba7260342c25899c"
  "pool/main/d/docker-compose/docker-compose_2.26.1-4_amd64.deb 47681197cb2b1ab88206b42a1a92fc75f50d9530a6322d03494a473eed0408ea"
  "pool/main/d/docker-buildx/docker-buildx_0.13.1+ds1-3_amd64.deb fcf8c48204d1603c8f209451d7827eb91bf30759578baf7704e9e1a87e5f1d7f"
)
BOOKWORM_PACKAGES=(runc tini)            # apt-get download from this machine's sources
COMPOSE_VERSION=2.26.1                   # what `docker compose version` must report
RECIPE="${TRIXIE_DEBS[*]} + apt:${BOOKWORM_PACKAGES[*]}"  # a pkgroot made otherwise is made again
BIN_PATH=$PKGROOT/usr/bin:$PKGROOT/usr/sbin
PLUGIN_DIR=$PKGROOT/usr/libexec/docker/cli-plugins
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

# --- packages: fetched (trixie's, pinned) or apt-get download (bookworm's), dpkg-deb -x --------
fetch_pinned() {  # fetch_pinned POOL_PATH SHA256: into $D/debs, verified, or one line and exit
  local path=$1 want=$2 file got rc=0
  file=$D/debs/${path##*/}
  curl -fsSL --retry 2 --connect-timeout 20 -o "$file.part" "$MIRROR/$path" 2>>"$D/fetch.log" || rc=$?
  if [ "$rc" = 22 ]; then  # an HTTP error: the pin, not this machine
    say "refusing: $MIRROR/$path is gone (HTTP error; Debian superseded it?): update TRIXIE_DEBS in $0"
    exit 1
  fi
  [ "$rc" = 0 ] || unavailable "cannot fetch $MIRROR/$path (curl exit $rc, see $D/fetch.log)"
  got=$(sha256sum "$file.part" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    rm -f "$file.part"
    say "refusing: ${path##*/} has sha256 $got, pinned $want"
    exit 1
  fi
  mv "$file.part" "$file"
}

if [ "$(cat "$PKGROOT/.recipe" 2>/dev/null)" != "$RECIPE" ]; then
  command -v curl >/dev/null || unavailable "no curl to fetch trixie's docker.io, docker-cli, containerd, docker-compose, docker-buildx"
  command -v apt-get >/dev/null || unavailable "no apt-get to fetch Debian's ${BOOKWORM_PACKAGES[*]}"
  # a daemon from an older pkgroot (bookworm's 20.10 before this recipe) must not run from files
  # being replaced; its data root is kept (dockerd 26 takes over 20.10's)
  stop_daemon
  say "fetching trixie's docker.io 26.1, docker-cli, containerd 1.7, docker-compose $COMPOSE_VERSION, docker-buildx and ${BOOKWORM_PACKAGES[*]} (about 95 MB) into $PKGROOT"
  rm -rf "$D/debs" "$PKGROOT"
  mkdir -p "$D/debs" "$PKGROOT"
  : >"$D/fetch.log"
  for pin in "${TRIXIE_DEBS[@]}"; do
    fetch_pinned $pin
  done
  # (apt warns that its sandbox user cannot write into a root-only folder, and downloads anyway)
  if ! (cd "$D/debs" && apt-get download -q "${BOOKWORM_PACKAGES[@]}" >/dev/null 2>"$D/apt.log"); then
    apt-get update -q >>"$D/apt.log" 2>&1 || true
    (cd "$D/debs" && apt-get download -q "${BOOKWORM_PACKAGES[@]}" >/dev/null 2>>"$D/apt.log") \
      || unavailable "apt-get download ${BOOKWORM_PACKAGES[*]} failed (see $D/apt.log)"
  fi
  for deb in "$D"/debs/*.deb; do
    dpkg-deb -x "$deb" "$PKGROOT"
    dpkg-deb -W --showformat='${Package}=${Version}\n' "$deb" >>"$PKGROOT/.versions"
  done
  mv "$PKGROOT/.versions" "$PKGROOT/.complete"
  printf '%s' "$RECIPE" >"$PKGROOT/.recipe"
  rm -rf "$D/debs"  # unpacked is all that is used
fi
for bin in usr/sbin/dockerd usr/bin/docker usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/sbin/runc usr/bin/docker-init \
           usr/libexec/docker/cli-plugins/docker-compose usr/libexec/docker/cli-plugins/docker-buildx; do
  [ -x "$PKGROOT/$bin" ] || unavailable "$PKGROOT/$bin missing after unpacking the packages"
done
# the CLI looks for plugins in $DOCKER_CONFIG/cli-plugins (never ~/.docker here)
mkdir -p "$CONFIG_DIR/cli-plugins"
for plugin in docker-compose docker-buildx; do
  ln -sfn "$PLUGIN_DIR/$plugin" "$CONFIG_DIR/cli-plugins/$plugin"
done
compose=$(DOCKER_CONFIG=$CONFIG_DIR "$PKGROOT/usr/bin/docker" compose version --short 2>&1 || true)
case "$compose" in
  "$COMPOSE_VERSION"*) ;;
  *) unavailable "docker compose version says '$compose', not $COMPOSE_VERSION (plugin in $CONFIG_DIR/cli-plugins)" ;;
esac

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
  echo "SHARDEVAL_DOCKER_CONFIG=$CONFIG_DIR"
  echo "SHARDEVAL_DOCKER_BASE=$BASE_IMAGE"
  echo "SHARDEVAL_DOCKER_STORAGE=$driver"
} >"$ENV_FILE.tmp"
mv "$ENV_FILE.tmp" "$ENV_FILE"

version=$("${DOCKER[@]}" version --format '{{.Server.Version}}')
if [ "$cmd" = setup ] && [ "$was_running" = 0 ]; then
  stop_daemon
  echo "docker: ready (dockerd $version, compose $compose, $driver, base image $BASE_IMAGE; stopped again: the tests start it); env in $ENV_FILE"
else
  echo "docker: dockerd $version running on $SOCK (compose $compose, $driver, base image $BASE_IMAGE); env in $ENV_FILE"
fi
