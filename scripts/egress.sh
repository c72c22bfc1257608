#!/usr/bin/env bash
# Builds the egress enforcer (egress/, Go: the standard library and golang.org/x/net/dns/dnsmessage)
# as static binaries for linux/amd64 and linux/arm64 into .build/egress/sbx-egress-linux-<arch>.
# Cached by input hash: when egress/'s files and the Go version are unchanged, it costs one hash.
# Each binary is written to a temp name and renamed, so a build never leaves half a binary.
# Usage: scripts/egress.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$SBX_ROOT/.build/egress
ARCHES=(amd64 arm64)
rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac

have go || die "go is not on PATH (sbx-egress is built from source)"
t=$(now_ms)
hold_lock egress

hash=$(
  {
    go env GOVERSION
    cd "$SBX_ROOT/egress" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum
)
hash=${hash:0:16}

cached=1
[ "$rebuild" = 0 ] || cached=0
[ "$(cat "$OUT/inputs" 2>/dev/null || true)" = "$hash" ] || cached=0
for arch in "${ARCHES[@]}"; do
  [ -x "$OUT/sbx-egress-linux-$arch" ] || cached=0
done
if [ "$cached" = 1 ]; then
  echo "egress: $hash cached in ${OUT#"$SBX_ROOT"/} ($(elapsed "$t"))"
  exit 0
fi

mkdir -p "$OUT"
for arch in "${ARCHES[@]}"; do
  tmp=$OUT/.sbx-egress-linux-$arch.$$
  (cd "$SBX_ROOT/egress" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp" .) ||
    { rm -f "$tmp"; die "go build of sbx-egress for linux/$arch failed"; }
  mv -f "$tmp" "$OUT/sbx-egress-linux-$arch"
done
printf '%s\n' "$hash" >"$OUT/inputs"
sizes=$(for arch in "${ARCHES[@]}"; do printf '%s %s bytes; ' "$arch" "$(stat -c %s "$OUT/sbx-egress-linux-$arch")"; done)
echo "egress: $hash built in ${OUT#"$SBX_ROOT"/} (${sizes% }) ($(elapsed "$t"))"
