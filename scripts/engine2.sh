#!/usr/bin/env bash
# A second, disposable Docker Engine for tests that must restart an engine (kill -9 or SIGTERM of
# dockerd) without touching the main one, which every other test shares.
#
# It runs in a network namespace of its own (a dockerd in the host's namespace rewrites the host's
# iptables and, with --bridge=none, deletes docker0 under the first daemon), with its own data root,
# exec root (so its own containerd and shims), pid file, cgroup parent, containerd namespace, config
# file and unix socket. Its boxes get a docker0 and iptables rules of their own inside that
# namespace; the namespace has no link to the host (no veth), so they reach each other, not the world.
#
# Usage: scripts/engine2.sh up              start it (idempotent) and load the images it needs
#        scripts/engine2.sh down            stop it, kill what is left, unmount, delete netns and dirs
#        scripts/engine2.sh restart [--kill] SIGTERM (or kill -9) dockerd, then start it on the same data
#        scripts/engine2.sh stop [--kill]   SIGTERM (or kill -9) dockerd and keep its data; `up` starts it again
#        scripts/engine2.sh env             print `export DOCKER_HOST=unix://...` for this engine
#        scripts/engine2.sh status          print whether it runs (exit 0) or not (exit 3)
# Environment: SBX_ENGINE2_NAME (default sbx-engine2: names the netns, /run/NAME, /var/lib/NAME,
# /var/log/NAME.log), SBX_ENGINE2_IMAGES (default sbx-base:latest, copied from the main engine),
# SBX_ENGINE2_IPTABLES=0 (start it with --iptables=false --bridge=none: no networking at all),
# SBX_ENGINE2_DOCKERD_ARGS (more dockerd arguments, split on spaces: e.g. --userns-remap=default for
# an engine whose boxes run in a user namespace; `up` restarts an engine of this
# name that runs with other arguments), SBX_ENGINE2_CONFIG (its daemon.json, default {}: e.g. runtimes;
# `up` restarts an engine of this name that runs with another), SBX_ENGINE2_START_TIMEOUT / SBX_ENGINE2_STOP_TIMEOUT (seconds, default 60 / 40).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac

NAME=${SBX_ENGINE2_NAME:-sbx-engine2}
case "$NAME" in *[!a-zA-Z0-9_-]* | "") die "SBX_ENGINE2_NAME must be [a-zA-Z0-9_-]+, not '$NAME'" ;; esac
RUN_DIR=/run/$NAME
SOCK=$RUN_DIR/docker.sock
PIDFILE=$RUN_DIR/docker.pid
EXEC_ROOT=$RUN_DIR/exec
CONFIG=$RUN_DIR/daemon.json
WANT_CONFIG=${SBX_ENGINE2_CONFIG:-{\}}
CONTAINERD_PIDFILE=$EXEC_ROOT/containerd/containerd.pid
DATA_ROOT=/var/lib/$NAME
LOG=/var/log/$NAME.log
NETNS=$NAME
NETNS_PATH=/run/netns/$NETNS
read -r -a IMAGES <<<"${SBX_ENGINE2_IMAGES:-sbx-base:latest}"
START_TIMEOUT_S=${SBX_ENGINE2_START_TIMEOUT:-60}
# dockerd's own --shutdown-timeout is 15 s; a box's stop timeout can be longer.
STOP_TIMEOUT_S=${SBX_ENGINE2_STOP_TIMEOUT:-40}
MAIN_SOCK=$(engine_socket)

DOCKERD_ARGS=(
  dockerd
  --data-root "$DATA_ROOT"
  --exec-root "$EXEC_ROOT"
  --pidfile "$PIDFILE"
  -H "unix://$SOCK"
  # Not /etc/docker/daemon.json: whatever the main engine is configured with (hosts, data-root) is not ours.
  --config-file "$CONFIG"
  --cgroup-parent "$NAME"
  --containerd-namespace "$NAME"
  --containerd-plugins-namespace "$NAME-plugins"
)
[ "${SBX_ENGINE2_IPTABLES:-1}" != 0 ] || DOCKERD_ARGS+=(--iptables=false --bridge=none)
read -r -a EXTRA_ARGS <<<"${SBX_ENGINE2_DOCKERD_ARGS:-}"
DOCKERD_ARGS+=("${EXTRA_ARGS[@]}")

did=()

usage() {
  die "usage: ${0##*/} up | down | restart [--kill] | stop [--kill] | env | status"
}

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (a network namespace, mounts, a dockerd)"
  have dockerd || die "no dockerd on PATH: run scripts/engine.sh first (it installs docker.io)"
  have nsenter && have ip && have curl || die "needs nsenter (util-linux), ip (iproute2) and curl"
}

ping2() {
  [ -S "$SOCK" ] && [ "$(curl -s --max-time 2 --unix-socket "$SOCK" http://localhost/_ping 2>/dev/null)" = OK ]
}

# True when process $1 has command name $2 and belongs to this engine: dockerd, its containerd and
# the shims all name the exec root on their command lines, and nothing else does.
is_ours() {
  local comm args
  { read -r comm <"/proc/$1/comm"; } 2>/dev/null || return 1
  [ "$comm" = "$2" ] || return 1
  args=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  case "$args " in *" $EXEC_ROOT "* | *"$EXEC_ROOT/"*) return 0 ;; esac
  return 1
}

# PIDs of this engine's processes named $1.
our_pids() {
  local pid
  for pid in $(pids_named "$1"); do
    if is_ours "$pid" "$1"; then printf '%s\n' "$pid"; fi
  done
}

# The pid of this engine's dockerd, or nothing. The pid file first (cheap), then a scan, because a
# pid file can be stale (kill -9) or not written yet (start-up).
dockerd_pid() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && is_ours "$pid" dockerd; then
    printf '%s' "$pid"
    return
  fi
  our_pids dockerd | head -n 1
}

# True when dockerd $1 runs with exactly the arguments and config this call would start it with.
same_settings() {
  local args
  args=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  [ "$args" = "${DOCKERD_ARGS[*]} " ] && [ "$(cat "$CONFIG" 2>/dev/null)" = "$(printf '%s\n' "$WANT_CONFIG")" ]
}

alive() {
  [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# wait_gone PID SECONDS: true when PID exited within SECONDS.
wait_gone() {
  local deadline=$(($(now_ms) + $2 * 1000))
  while alive "$1"; do
    [ "$(now_ms)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

ensure_netns() {
  # A netns file that is no longer a namespace (its mount went away) cannot be entered: start over.
  if [ -e "$NETNS_PATH" ] && ! nsenter --net="$NETNS_PATH" true 2>/dev/null; then
    ip netns delete "$NETNS" 2>/dev/null || rm -f "$NETNS_PATH"
  fi
  if [ ! -e "$NETNS_PATH" ]; then
    ip netns add "$NETNS"
    did+=("created netns $NETNS")
  fi
  ip -n "$NETNS" link set lo up
}

# What a killed dockerd leaves behind and a new one trips over.
clear_stale() {
  if [ -e "$PIDFILE" ]; then
    rm -f "$PIDFILE"
    did+=("removed stale $PIDFILE")
  fi
  # dockerd trusts the pid file of the containerd it manages; a recycled pid would make it wait on
  # a process that is not containerd. A containerd that outlived its dockerd is reused as it is.
  local cpid
  cpid=$(cat "$CONTAINERD_PIDFILE" 2>/dev/null || true)
  if [ -n "$cpid" ] && ! is_ours "$cpid" containerd; then
    rm -f "$CONTAINERD_PIDFILE"
    did+=("removed stale containerd pid file")
  fi
}

# Starts dockerd unless one of ours runs, then waits for its /_ping.
start_daemon() {
  local pid log_start t deadline
  t=$(now_ms)
  pid=$(dockerd_pid)
  if [ -z "$pid" ]; then
    ensure_netns
    clear_stale
    mkdir -p "$RUN_DIR" "$EXEC_ROOT" "$DATA_ROOT"
    printf '%s\n' "$WANT_CONFIG" >"$CONFIG"
    log_start=0
    [ -f "$LOG" ] && log_start=$(stat -c %s "$LOG")
    printf '\n=== %s: engine2.sh starts %s\n' "$(date -u +%FT%TZ)" "${DOCKERD_ARGS[*]}" >>"$LOG"
    spawn_detached "$LOG" nsenter --net="$NETNS_PATH" "${DOCKERD_ARGS[@]}"
  else
    did+=("waited for running dockerd $pid")
    log_start=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
  fi
  deadline=$(($(now_ms) + START_TIMEOUT_S * 1000))
  until ping2; do
    if [ -z "$(dockerd_pid)" ] && [ "$(($(now_ms) - t))" -gt 2000 ]; then
      tail -c +"$((log_start + 1))" "$LOG" | tail -n 25 >&2
      die "dockerd exited during start-up (log above, full log: $LOG)"
    fi
    if [ "$(now_ms)" -ge "$deadline" ]; then
      tail -c +"$((log_start + 1))" "$LOG" | tail -n 25 >&2
      die "no answer on $SOCK/_ping after ${START_TIMEOUT_S}s (log above, full log: $LOG)"
    fi
    sleep 0.05
  done
  [ -n "$pid" ] || did+=("started dockerd $(dockerd_pid) in $(elapsed "$t") (log $LOG)")
}

image_id() {
  curl -s --max-time 5 --unix-socket "$1" "http://localhost/images/$2/json" 2>/dev/null | grep -o '"Id":"sha256:[0-9a-f]*"' | head -n 1 || true
}

# Copies each image from the main engine unless engine2 has the same image id already.
load_images() {
  local img want got t
  [ -n "$MAIN_SOCK" ] || die "DOCKER_HOST=${DOCKER_HOST:-} is not a unix socket; the images come from the main engine's socket"
  for img in "${IMAGES[@]}"; do
    want=$(image_id "$MAIN_SOCK" "$img")
    [ -n "$want" ] || die "the main engine ($MAIN_SOCK) has no $img: run scripts/images.sh first"
    got=$(image_id "$SOCK" "$img")
    [ "$got" != "$want" ] || continue
    t=$(now_ms)
    docker -H "unix://$MAIN_SOCK" save "$img" | docker -H "unix://$SOCK" load -q >/dev/null ||
      die "could not copy $img from the main engine into $NAME"
    did+=("loaded $img in $(elapsed "$t")")
  done
}

# The whole point of the namespace: the main engine must come out of this unharmed.
check_main() {
  if [ "$1" = 1 ] && ! ip link show docker0 >/dev/null 2>&1; then
    die "the host's docker0 is gone since $NAME started: the main engine's boxes have no network (restart the main dockerd)"
  fi
  if [ -n "$MAIN_SOCK" ] && [ -S "$MAIN_SOCK" ] && ! DOCKER_HOST="unix://$MAIN_SOCK" engine_ping; then
    warn "the main engine ($MAIN_SOCK) does not answer /_ping"
  fi
}

# report WHAT T0: one line, "engine2: WHAT: what was done (time)".
report() {
  local what=$1 t=$2 summary
  if [ "${#did[@]}" -eq 0 ]; then
    echo "engine2: $what ($(elapsed "$t"))"
  else
    summary=$(printf '%s; ' "${did[@]}")
    echo "engine2: $what: ${summary%; } ($(elapsed "$t"))"
  fi
}

cmd_up() {
  local t pid had_docker0=0
  t=$(now_ms)
  need_root
  [ "$MAIN_SOCK" != "$SOCK" ] || die "DOCKER_HOST points at $NAME itself; unset it (the main engine is where the images come from)"
  ip link show docker0 >/dev/null 2>&1 && had_docker0=1
  hold_lock "$NAME"
  pid=$(dockerd_pid)
  # Another test's settings (a remap, no iptables) must not pass for this one's.
  if [ -n "$pid" ] && ! same_settings "$pid"; then
    stop_dockerd TERM "$pid"
    did+=("it ran with other arguments or config")
  fi
  ping2 || start_daemon
  load_images
  check_main "$had_docker0"
  report "up at unix://$SOCK" "$t"
}

# Signals dockerd and waits for it; a SIGTERM that does not end it in time becomes a SIGKILL.
stop_dockerd() {
  local sig=$1 pid=$2 t
  t=$(now_ms)
  kill -s "$sig" "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" "$STOP_TIMEOUT_S"; then
    kill -s KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || die "dockerd $pid survived SIGKILL"
    did+=("dockerd $pid ignored SIG$sig for ${STOP_TIMEOUT_S}s; killed")
    return
  fi
  did+=("dockerd $pid exited on SIG$sig in $(elapsed "$t")")
}

describe_leftovers() {
  local c s
  c=$(our_pids containerd | tr '\n' ' ')
  s=$(our_pids containerd-shim | wc -l)
  did+=("left running: ${c:+containerd ${c% }, }$s containerd-shim")
}

# cmd_stop_or_restart stop|restart [--kill]
cmd_stop_or_restart() {
  local t pid sig=TERM
  case "${2:-}" in
    --kill) sig=KILL ;;
    "") ;;
    *) usage ;;
  esac
  t=$(now_ms)
  need_root
  hold_lock "$NAME"
  pid=$(dockerd_pid)
  [ -n "$pid" ] || die "$NAME is not running; start it with: ${0##*/} up"
  stop_dockerd "$sig" "$pid"
  describe_leftovers
  if [ "$1" = stop ]; then
    report "stopped with SIG$sig, data kept in $DATA_ROOT" "$t"
    return
  fi
  start_daemon
  report "restarted after SIG$sig, up at unix://$SOCK" "$t"
}

# Kills every process in this engine's cgroups (the boxes' processes, which outlive a killed shim),
# then removes the cgroups.
kill_cgroups() {
  local dirs=() d p
  mapfile -t dirs < <(find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -name "$NAME" 2>/dev/null)
  [ "${#dirs[@]}" -gt 0 ] || return 0
  for d in "${dirs[@]}"; do
    while read -r p; do
      [ -n "$p" ] && kill -s KILL "$p" 2>/dev/null || true
    done < <(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  sleep 0.1
  for d in "${dirs[@]}"; do
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# Mount points under this engine's directories, deepest first (mountinfo escapes spaces as \040).
our_mounts() {
  local _a _b _c _d mnt _rest
  while read -r _a _b _c _d mnt _rest; do
    mnt=$(printf '%b' "$mnt")
    case "$mnt" in "$RUN_DIR" | "$RUN_DIR"/* | "$DATA_ROOT" | "$DATA_ROOT"/*) printf '%s\n' "$mnt" ;; esac
  done </proc/self/mountinfo | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

cmd_down() {
  local t pid p mnt n=0
  t=$(now_ms)
  need_root
  hold_lock "$NAME"
  pid=$(dockerd_pid)
  [ -z "$pid" ] || stop_dockerd TERM "$pid"
  # After a clean stop nothing is left; after a kill -9, containerd and shims may be.
  for p in $(our_pids containerd-shim) $(our_pids containerd); do
    kill -s KILL "$p" 2>/dev/null && n=$((n + 1))
  done
  [ "$n" = 0 ] || did+=("killed $n leftover containerd/shim process(es)")
  kill_cgroups
  n=0
  while read -r mnt; do
    [ -n "$mnt" ] || continue
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || warn "could not unmount $mnt"
    n=$((n + 1))
  done < <(our_mounts)
  [ "$n" = 0 ] || did+=("unmounted $n")
  if [ -e "$NETNS_PATH" ]; then
    ip netns delete "$NETNS" 2>/dev/null || warn "could not delete netns $NETNS"
    did+=("deleted netns $NETNS")
  fi
  rm -rf "$RUN_DIR" "$DATA_ROOT"
  report "down" "$t"
}

cmd_status() {
  local pid
  pid=$(dockerd_pid)
  if ping2; then
    echo "engine2: up, dockerd $pid, at unix://$SOCK"
  elif [ -n "$pid" ]; then
    echo "engine2: dockerd $pid runs but does not answer on $SOCK (starting or stopping)"
    exit 3
  else
    echo "engine2: down"
    exit 3
  fi
}

cmd=${1:-}
[ $# -ge 1 ] && shift
case "$cmd" in
  up | down | env | status) [ $# = 0 ] || usage ;;
  restart | stop) [ $# -le 1 ] || usage ;;
  *) usage ;;
esac
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  restart | stop) cmd_stop_or_restart "$cmd" "${1:-}" ;;
  env) echo "export DOCKER_HOST=unix://$SOCK" ;;
  status) cmd_status ;;
esac
