#!/usr/bin/env bash
# Builds the in-box agent (agent/, Go, standard library only) as static binaries for
# linux/amd64 and linux/arm64 into .build/agent/sbx-agent-linux-<arch>. Cached by input hash:
# when agent/'s files and the Go version are unchanged, it costs one hash of a few files.
# Each binary is written to a temp name and renamed, so boxes running the old one keep it.
# Usage: scripts/agent.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$SBX_ROOT/.build/agent
ARCHES=(amd64 arm64)
rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac

have go || die "go is not on PATH (the agent is built from source: Go, standard library only)"
t=$(now_ms)
hold_lock agent

hash=$(
  {
    go env GOVERSION
    cd "$SBX_ROOT/agent" && find . -path ./testprogs -prune -o -type f \( -name '*.go' -o -name 'go.mod' \) ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum
)
hash=${hash:0:16}

cached=1
[ "$rebuild" = 0 ] || cached=0
[ "$(cat "$OUT/inputs" 2>/dev/null || true)" = "$hash" ] || cached=0
for arch in "${ARCHES[@]}"; do
  [ -x "$OUT/sbx-agent-linux-$arch" ] || cached=0
done
if [ "$cached" = 1 ]; then
  echo "agent: $hash cached in ${OUT#"$SBX_ROOT"/} ($(elapsed "$t"))"
  exit 0
fi

mkdir -p "$OUT"
for arch in "${ARCHES[@]}"; do
  tmp=$OUT/.sbx-agent-linux-$arch.$$
  (cd "$SBX_ROOT/agent" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp" .) ||
    { rm -f "$tmp"; die "go build of the agent for linux/$arch failed"; }
  mv -f "$tmp" "$OUT/sbx-agent-linux-$arch"
done
printf '%s\n' "$hash" >"$OUT/inputs"
sizes=$(for arch in "${ARCHES[@]}"; do printf '%s %s bytes; ' "$arch" "$(stat -c %s "$OUT/sbx-agent-linux-$arch")"; done)
echo "agent: $hash built in ${OUT#"$SBX_ROOT"/} (${sizes% }) ($(elapsed "$t"))"
