# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# The agent binary for this machine's architecture, built (or found cached) by scripts/agent.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "sbx-agent image: no agent build for $(uname -m)" >&2; exit 1 ;;
esac
bash "$root/scripts/agent.sh" >&2
printf '%s\t%s\n' "$root/.build/agent/sbx-agent-linux-$arch" sbx-agent
