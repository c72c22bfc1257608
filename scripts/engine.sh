#!/usr/bin/env bash
# Makes a Docker Engine reachable (DOCKER_HOST, else /var/run/docker.sock) and the host tools the
# images and the test registries use present. On a bare Debian machine, as root, it installs
# docker.io and friends and starts dockerd detached. Idempotent; tens of ms when all is in place.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t0=$(now_ms)
# dockerd lives in /usr/sbin, which a non-login root shell may not have on PATH.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac
DOCKERD_LOG=${SBX_DOCKERD_LOG:-/var/log/sbx-dockerd.log}
START_TIMEOUT_S=${SBX_ENGINE_START_TIMEOUT:-60}
DEFAULT_SOCK=/var/run/docker.sock
PIDFILE=/var/run/docker.pid
CONTAINERD_PIDFILE=/var/run/docker/containerd/containerd.pid
# Wanted even when an engine is already up: registry.sh runs docker-registry and htpasswd; images.sh
# builds sbx-base's busybox (scripts/busybox.sh) from the source of busybox-static's version, with
# dpkg-dev's tools and a static libc; images/sbx-egress copies in the host's nft and its libraries.
TOOL_PACKAGES=(busybox-static dpkg-dev gcc libc6-dev docker-registry apache2-utils nftables)
# The programs images/sbx-desktop copies in (Xvfb, twm, x11vnc, xsetroot, xclock, xterm), the
# browser the VNC test drives, and mmdebstrap, which builds sbx-e2b's Debian root filesystem
# (scripts/debian-rootfs.sh); installed without recommends (chromium's would pull in ~100 MB,
# mmdebstrap's fakechroot, uidmap and friends serve modes other than root's).
LEAN_PACKAGES=(xvfb x11-xkb-utils twm x11vnc x11-xserver-utils x11-apps xterm chromium mmdebstrap)

did=()

start_dockerd() {
  local running log_start t
  running=$(pids_named dockerd)
  log_start=0
  [ -f "$DOCKERD_LOG" ] && log_start=$(stat -c %s "$DOCKERD_LOG")
  t=$(now_ms)
  if [ -n "$running" ]; then
    did+=("waited for running dockerd (pid ${running//$'\n'/,})")
  else
    # A killed dockerd leaves its pidfile behind, and a new one refuses to start while it exists.
    if [ -e "$PIDFILE" ]; then
      rm -f "$PIDFILE"
      did+=("removed stale $PIDFILE")
    fi
    # dockerd also trusts the pidfile of the containerd it manages; a recycled pid would make it
    # wait on a process that is not containerd.
    local cpid comm=
    cpid=$(cat "$CONTAINERD_PIDFILE" 2>/dev/null || true)
    if [ -n "$cpid" ]; then
      { read -r comm <"/proc/$cpid/comm"; } 2>/dev/null || true
      [ "$comm" = containerd ] || rm -f "$CONTAINERD_PIDFILE"
    fi
    spawn_detached "$DOCKERD_LOG" dockerd
  fi
  local deadline=$(($(now_ms) + START_TIMEOUT_S * 1000))
  until engine_ping; do
    if [ -z "$running" ] && [ -z "$(pids_named dockerd)" ] && [ "$(($(now_ms) - t))" -gt 2000 ]; then
      tail -c +"$((log_start + 1))" "$DOCKERD_LOG" | tail -n 25 >&2
      die "dockerd exited during start-up (log above, full log: $DOCKERD_LOG)"
    fi
    if [ "$(now_ms)" -ge "$deadline" ]; then
      [ -n "$running" ] && die "dockerd (pid ${running//$'\n'/,}) runs but $DEFAULT_SOCK gave no /_ping answer for ${START_TIMEOUT_S}s; it may serve another socket, or be stuck (stop it, then run this again)"
      tail -c +"$((log_start + 1))" "$DOCKERD_LOG" | tail -n 25 >&2
      die "no answer on $DEFAULT_SOCK/_ping after ${START_TIMEOUT_S}s (log above, full log: $DOCKERD_LOG)"
    fi
    sleep 0.2
  done
  [ -n "$running" ] || did+=("started dockerd in $(elapsed "$t") (log $DOCKERD_LOG)")
}

mapfile -t install < <(missing_packages "${TOOL_PACKAGES[@]}")
have curl || install+=(curl)
mapfile -t lean < <(missing_packages "${LEAN_PACKAGES[@]}")

up=1
if ! engine_ping; then
  hold_lock engine
  engine_ping || up=0
fi
if [ "$up" = 0 ]; then
  sock=$(engine_socket)
  if [ "$sock" != "$DEFAULT_SOCK" ] && [ "$sock" != "${DEFAULT_SOCK#/var}" ]; then
    die "DOCKER_HOST=${DOCKER_HOST} does not answer; start that engine, or unset DOCKER_HOST to use a local one"
  fi
  have dockerd || install+=(docker.io)
fi

if [ "${#install[@]}" -gt 0 ]; then
  hold_lock engine
  mapfile -t install < <(missing_packages "${install[@]}")
  [ "${#install[@]}" -eq 0 ] || apt_install "${install[@]}"
fi
if [ "${#lean[@]}" -gt 0 ]; then
  hold_lock engine
  mapfile -t lean < <(missing_packages "${lean[@]}")
  [ "${#lean[@]}" -eq 0 ] || apt_install --no-install-recommends "${lean[@]}"
fi
[ "$up" = 1 ] || start_dockerd

where=${DOCKER_HOST:-unix://$DEFAULT_SOCK}
if [ "${#did[@]}" -eq 0 ]; then
  echo "engine: up at $where ($(elapsed "$t0"))"
else
  summary=$(printf '%s; ' "${did[@]}")
  echo "engine: up at $where: ${summary%; } ($(elapsed "$t0"))"
fi
