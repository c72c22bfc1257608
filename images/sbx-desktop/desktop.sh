#!/bin/sh
# The desktop of an sbx-desktop box, started beside the box's command (by default sbx's graceful
# sleep): Xvfb on :0, twm, a solid root colour with a clock and a terminal on it, and x11vnc on
# 0.0.0.0:5900 (all interfaces of the box, so the engine's published port reaches it). All of it
# runs as the box user and needs no capability. SIGTERM stops everything and exits 0.
#   VNC_PASSWORD   when set, viewers must give it (VNC authentication); sbx's own auth applies anyway
#   VNC_GEOMETRY   the screen size, default 1280x800
# (Not SBX_*: sbx keeps those names for itself and refuses them in a box's env.)
set -u
export DISPLAY=:0
geometry=${VNC_GEOMETRY:-1280x800}
# The colour the tests look for in a screenshot (src/server/vnc.test.ts).
root_colour='#2a6f97'
pids=

stop() {
  trap - TERM INT
  # shellcheck disable=SC2086 # a list of pids
  [ -z "$pids" ] || kill $pids 2>/dev/null
  # Each by pid: a bare `wait` would also wait for orphans reparented to us when we are PID 1
  # (the command's own `sleep`), which nobody signals.
  for p in $pids; do wait "$p"; done
  exit "$1"
}
trap 'stop 0' TERM INT

# A box restarted by the engine keeps its /tmp: a dead server's lock would refuse display :0.
rm -f /tmp/.X0-lock /tmp/.X11-unix/X0
# Made here, not in the image: a strict box's /tmp is an empty tmpfs.
mkdir -p -m 1777 /tmp/.X11-unix
Xvfb :0 -screen 0 "${geometry}x24" -nolisten tcp -noreset &
pids=$!
n=0
until [ -S /tmp/.X11-unix/X0 ]; do
  n=$((n + 1))
  if [ "$n" -gt 200 ] || ! kill -0 "$pids" 2>/dev/null; then
    echo "sbx-desktop: Xvfb did not start" >&2
    stop 1
  fi
  sleep 0.05
done

xsetroot -solid "$root_colour"
twm -f /etc/sbx-desktop/twmrc &
pids="$pids $!"
xclock -geometry 220x220+60+60 -update 1 &
pids="$pids $!"
xterm -geometry 80x24+340+60 -title "sbx desktop" &
pids="$pids $!"

auth=-nopw
if [ -n "${VNC_PASSWORD:-}" ]; then
  x11vnc -storepasswd "$VNC_PASSWORD" /tmp/.sbx-vnc-passwd >/dev/null 2>&1 || stop 1
  auth="-rfbauth /tmp/.sbx-vnc-passwd"
fi
# shellcheck disable=SC2086 # $auth is one or two words
x11vnc -display :0 -rfbport 5900 -listen 0.0.0.0 -forever -shared -quiet $auth &
pids="$pids $!"

"$@" &
cmd=$!
pids="$pids $cmd"
wait "$cmd"
stop $?
