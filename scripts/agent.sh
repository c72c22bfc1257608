#!/usr/bin/env bash
# Builds the in-box agent (agent/, Go, standard library only) as static binaries for
# linux/amd64 and linux/arm64 into .build/agent/sbx-agent-linux-<arch>, cached by input hash
# (build_static_go in lib.sh).
# Usage: scripts/agent.sh [--rebuild]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  --rebuild) build_static_go agent sbx-agent 1 ;;
  "") build_static_go agent sbx-agent 0 ;;
  *) die "usage: ${0##*/} [--rebuild]" ;;
esac
