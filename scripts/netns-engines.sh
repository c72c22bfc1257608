#!/usr/bin/env bash
# Network namespace engines sbx-t1..9 for the tests of remote nodes (src/testing/netns-engine.ts):
# each a network namespace with its own dockerd, as a second and third machine. Needs root.
# Usage: scripts/netns-engines.sh up N…      bring them up (idempotent) and load the test images
#        scripts/netns-engines.sh down N…    stop dockerd, delete veth and namespace (keeps the image cache)
#        scripts/netns-engines.sh down all   every one something of is left (what scripts/test.sh runs)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SBX_ROOT"

# `down all` with nothing there is the common case after a suite: no node start-up for it.
if [ "${1:-}" = down ] && [ "${2:-}" = all ] && [ $# = 2 ]; then
  shopt -s nullglob
  left=(/run/netns/sbx-t[1-9] /run/sbx-t[1-9] /sys/class/net/sbxt[1-9]-h)
  [ "${#left[@]}" -gt 0 ] || exit 0
fi
exec node --import tsx src/testing/netns-engines-cli.ts "$@"
