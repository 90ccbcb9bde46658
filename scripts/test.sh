#!/usr/bin/env bash
# The project's test command (`pnpm test`): lint, type-check, look for import cycles and dead exports, start the real
# servers, run every test, stop the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
# SKIP_CHECKS=1 skips lint, typecheck, the import-cycle and the dead-code checks for a quick, focused run:
# `SKIP_CHECKS=1 pnpm test services/auth`.
if [ -z "${SKIP_CHECKS:-}" ]; then
  pnpm -s lint
  pnpm -s typecheck
  pnpm -s cycles
  pnpm -s dead-code
fi
source scripts/test-env.sh
trap test_env_down EXIT
test_env_up
pnpm exec vitest run "$@"
