# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# busybox built static by scripts/busybox.sh (Debian's source and config plus busybox.config, beside
# this file; found cached when nothing changed). Debian's busybox-static binary crashes on `wget -T`,
# and the dynamic `busybox` package would not run in scratch. The build's input hash comes along
# (unused by the Dockerfile) so that the image's tag follows it: images.sh knows a file over 1 MiB
# by size and mtime only, and the build gives the binary a fixed mtime.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$root/scripts/busybox.sh" >&2
printf '%s\t%s\n' "$root/.build/busybox/busybox" busybox "$root/.build/busybox/inputs" busybox.inputs
