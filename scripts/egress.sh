#!/usr/bin/env bash
# Builds the egress enforcer (egress/, Go: the standard library and golang.org/x/net/dns/dnsmessage)
# as static binaries for linux/amd64 and linux/arm64 into .build/egress/sbx-egress-linux-<arch>,
# cached by input hash (build_static_go in lib.sh).
# Usage: scripts/egress.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  --rebuild) build_static_go egress sbx-egress 1 ;;
  "") build_static_go egress sbx-egress 0 ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac
