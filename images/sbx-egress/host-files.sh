# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# The sbx-egress binary for this machine's architecture (built first by scripts/egress.sh, whose
# messages go to stderr: stdout is the list), and the host's nft with the shared libraries and
# loader ldd names for it, each at its host path under rootfs/ (the loader needs no ld.so.cache
# then). nft comes from the host's Debian package, so nothing is pulled and the userspace matches
# the kernel it was installed for.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$root/scripts/egress.sh" >&2
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) echo "sbx-egress: no build for $(uname -m)" >&2; exit 1 ;;
esac
nft=/usr/sbin/nft
[ -x "$nft" ] || { echo "sbx-egress needs $nft: install the nftables package" >&2; exit 1; }
printf '%s\t%s\n' "$root/.build/egress/sbx-egress-linux-$arch" rootfs/usr/local/bin/sbx-egress
printf '%s\t%s\n' "$nft" "rootfs$nft"
ldd "$nft" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u |
  while read -r lib; do printf '%s\t%s\n' "$lib" "rootfs$lib"; done
