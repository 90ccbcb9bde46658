#!/usr/bin/env bash
# usage: pnpm typecheck
# Type-checks the repository's own files (tsconfig.json: scripts, tests) and every workspace package (each one's
# `typecheck`, tsc -p tsconfig.json), without emitting anything. Takes no arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "pnpm typecheck: takes no arguments, got $* (pnpm typecheck --help shows how)" >&2; exit 2 ;;
esac
tsc -p tsconfig.json
pnpm -r --reporter=append-only typecheck
