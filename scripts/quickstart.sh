#!/usr/bin/env bash
# The README's first command: bring up the engine, images and in-box agent, then run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/engine.sh
bash scripts/images.sh
bash scripts/agent.sh
exec npx tsx examples/quickstart.ts
