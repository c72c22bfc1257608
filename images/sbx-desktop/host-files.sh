# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# The X programs Debian installed on the host (scripts/engine.sh installs LEAN_PACKAGES), the
# shared libraries and loader ldd names for them, each at its host path under rootfs/ (the loader
# needs no ld.so.cache then), the keyboard data Xvfb compiles its keymap from, Xlib's locale
# database (twm's and xterm's font sets need it even in the C locale) and the X server's table of
# request names for its error messages.
set -euo pipefail
programs=(/usr/bin/Xvfb /usr/bin/xkbcomp /usr/bin/x11vnc /usr/bin/twm /usr/bin/xsetroot /usr/bin/xclock /usr/bin/xterm)
data=(/usr/share/X11/xkb /usr/share/X11/locale /usr/lib/xorg/protocol.txt)
for f in "${programs[@]}" "${data[@]}"; do
  [ -e "$f" ] || { echo "sbx-desktop needs $f: run scripts/engine.sh (it installs the desktop packages)" >&2; exit 1; }
done
for f in "${programs[@]}" "${data[@]}"; do printf '%s\t%s\n' "$f" "rootfs$f"; done
# One ldd per program; a library several need is listed once.
for f in "${programs[@]}"; do ldd "$f"; done |
  awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u |
  while read -r lib; do printf '%s\t%s\n' "$lib" "rootfs$lib"; done
