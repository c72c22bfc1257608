# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# The host's bash (Debian's, always installed) and the libraries and loader ldd names for it, each
# at its host path under rootfs/.
set -euo pipefail
printf '%s\t%s\n' /usr/bin/bash rootfs/bin/bash
ldd /usr/bin/bash | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u |
  while read -r lib; do printf '%s\t%s\n' "$lib" "rootfs$lib"; done
