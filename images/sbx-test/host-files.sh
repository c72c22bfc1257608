# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# The host's node (at /usr/local/bin, wherever the host keeps it), the shared libraries and loader
# ldd names, each at its host path under rootfs/ (so the loader finds them without an ld.so.cache),
# and the dependency-free `ws` package.
set -euo pipefail
node=$(readlink -f "$(command -v node)")
printf '%s\t%s\n' "$node" rootfs/usr/local/bin/node
ldd "$node" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u |
  while read -r lib; do printf '%s\t%s\n' "$lib" "rootfs$lib"; done
ws=$SBX_ROOT/node_modules/ws
[ -f "$ws/package.json" ] || { echo "sbx-test needs $ws: run npm ci first" >&2; exit 1; }
printf '%s\t%s\n' "$ws" rootfs/opt/sbx-test/node_modules/ws
