#!/usr/bin/env bash
# The README's first command: bring up the engine and images, then run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/engine.sh
bash scripts/images.sh
exec npx tsx examples/quickstart.ts
