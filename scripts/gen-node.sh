#!/usr/bin/env bash
# Regenerates src/runtime/remote/gen/ from src/runtime/remote/proto/ (buf + protoc-gen-es from
# node_modules). Run after editing a .proto; the generated files are committed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../src/runtime/remote"
export PATH="$PWD/../../../node_modules/.bin:$PATH"
rm -rf gen
buf generate
npx prettier --log-level warn --write gen >/dev/null
