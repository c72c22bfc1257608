#!/usr/bin/env bash
# Builds the root filesystem of sbx-e2b (the e2b `base` template, docs/e2b.md) into
# .build/debian-rootfs/rootfs.tar: Debian bookworm, variant minbase (Essential: yes packages and
# apt), plus the packages listed in images/sbx-e2b/packages, from Debian's archive (no registry
# is reachable, but the archive is). Documentation, man pages and translations are left out.
#
# mmdebstrap rather than debootstrap: it resolves the extra packages with apt in one pass and
# downloads in parallel (about 40 s cold here), writes the tarball directly (no chroot directory
# to pack and clean up), and honours SOURCE_DATE_EPOCH, so the same package versions give the
# same tarball. debootstrap would need a second apt step inside a chroot for the extra packages.
#
# Cached by input hash (suite, package list, this script, mmdebstrap's version): a cached run
# costs one hash of a few small files. The archive is not pinned to a date: a cold build takes
# the suite's packages as they are that day (bookworm's point releases and security updates), so
# two machines that build weeks apart may get different versions of the same packages; a
# machine keeps what it built until an input changes or `--rebuild` asks for today's packages.
# .build/debian-rootfs/packages.txt lists the versions of the last build.
# Usage: scripts/debian-rootfs.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$SBX_ROOT/.build/debian-rootfs
PACKAGES=$SBX_ROOT/images/sbx-e2b/packages
SUITE=bookworm
MIRROR=${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SBX_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# Every file's mtime in the tarball (mmdebstrap clamps to it): 2024-01-01T00:00:00Z.
export SOURCE_DATE_EPOCH=1704067200
rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac

t=$(now_ms)
hold_lock debian-rootfs
have mmdebstrap || die "mmdebstrap is missing: run scripts/engine.sh (it installs it)"
[ "$(id -u)" = 0 ] || die "mmdebstrap's root mode needs root (the files in the tarball belong to several users)"

mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$PACKAGES")
[ "${#packages[@]}" -gt 0 ] || die "$PACKAGES lists no package"
hash=$(
  {
    printf 'suite %s\n' "$SUITE"
    printf '%s\n' "${packages[@]}"
    mmdebstrap --version
    sha256sum <"${BASH_SOURCE[0]}"
  } | sha256sum
)
hash=${hash:0:16}

if [ "$rebuild" = 0 ] && [ -f "$OUT/rootfs.tar" ] && [ "$(cat "$OUT/inputs" 2>/dev/null || true)" = "$hash" ]; then
  echo "debian-rootfs: $hash cached in ${OUT#"$SBX_ROOT"/} ($(elapsed "$t"))"
  exit 0
fi

mkdir -p "$OUT"
tmp=$OUT/.rootfs.$$.tar  # mmdebstrap picks the format by the extension
log=$OUT/build.log
# shellcheck disable=SC2064 # tmp must expand now
trap "rm -rf '$tmp'" EXIT
include=$(
  IFS=,
  echo "${packages[*]}"
)
# bookworm-updates and the security archive too: a box runs code from the Internet on these
# packages, so their fixes belong in it. dpkg's path filters keep copyright files (licences).
if ! mmdebstrap --mode=root --variant=minbase --include="$include" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='chroot "$1" dpkg-query -W -f="\${Package} \${Version}\n" >"$1/tmp/packages.txt"' \
  --customize-hook="download /tmp/packages.txt '$OUT/packages.txt'" \
  --customize-hook='rm -f "$1/tmp/packages.txt"' \
  "$SUITE" "$tmp" \
  "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY_MIRROR $SUITE-security main" >"$log" 2>&1; then
  tail -n 25 "$log" >&2
  die "mmdebstrap failed (log: $log)"
fi
# A fixed mtime: images.sh knows a file this big by name, size and mtime (the inputs file, which
# goes into the build context beside it, makes the image's tag follow the inputs).
touch -d "@$SOURCE_DATE_EPOCH" "$tmp"
mv -f "$tmp" "$OUT/rootfs.tar"
trap - EXIT
printf '%s\n' "$hash" >"$OUT/inputs"
echo "debian-rootfs: $hash built in ${OUT#"$SBX_ROOT"/} ($SUITE, $(wc -l <"$OUT/packages.txt") packages, $(stat -c %s "$OUT/rootfs.tar") bytes) ($(elapsed "$t"))"
