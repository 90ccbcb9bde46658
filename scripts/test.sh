#!/usr/bin/env bash
# The project's test command (`pnpm test`): lint, type-check, start the real
# servers, run every test, stop the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
pnpm -s lint
pnpm -s typecheck
source scripts/test-env.sh
trap test_env_down EXIT
test_env_up
pnpm exec vitest run "$@"
