# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# The Debian root filesystem scripts/debian-rootfs.sh builds from `packages` beside this file
# (found cached when nothing changed). Its input hash comes along (unused by the Dockerfile) so that
# the image's tag follows it: images.sh knows a file over 1 MiB by size and mtime only, and the
# build gives the tarball a fixed mtime.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$root/scripts/debian-rootfs.sh" >&2
printf '%s\t%s\n' "$root/.build/debian-rootfs/rootfs.tar" rootfs.tar "$root/.build/debian-rootfs/inputs" rootfs.inputs
