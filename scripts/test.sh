#!/usr/bin/env bash
# The project's test command (`pnpm test`): lint (code and the OpenAPI documents), type-check, look for import cycles
# and dead exports, start the real servers, run every test with every answer checked against its service's OpenAPI
# document, stop the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  case "$arg" in
    --) break ;;
    -h | --help)
      cat <<'USAGE'
usage: pnpm test [vitest arguments: files, folders, -t NAME ...]

Lints (code and the OpenAPI documents), type-checks, looks for import cycles and dead exports, starts the real test
servers (PostgreSQL, NATS, S3, a Consul stand-in, the Solana localnet; installed with apt when missing, as root), runs
the tests with every answer checked against its service's OpenAPI document, and stops the servers.
  SKIP_CHECKS=1      skip lint, type-check, cycles and dead code (a quick, focused run)
  TEST_PORT_BASE=N   the test servers at N+0..9 and the platforms the tests start above them (two runs side by side)
  TEST_ENV_DIR=DIR   where the test servers keep their data (default .test-env)
vitest's own options: pnpm exec vitest --help
USAGE
      exit 0
      ;;
  esac
done
# SKIP_CHECKS=1 skips lint, typecheck, the import-cycle and the dead-code checks for a quick, focused run:
# `SKIP_CHECKS=1 pnpm test services/auth`.
if [ -z "${SKIP_CHECKS:-}" ]; then
  pnpm -s lint
  pnpm -s typecheck
  pnpm -s cycles
  pnpm -s dead-code
  pnpm -s lint:api
fi
source scripts/test-env.sh
trap test_env_down EXIT
test_env_up
# Every answer of a documented operation, in every app the tests start, is checked against its service's document
# (packages/common/src/openapi/response-check.ts); any mismatch fails the run.
export OPENAPI_CHECK_FILE="$TEST_ENV_DIR/openapi-mismatches.jsonl"
: >"$OPENAPI_CHECK_FILE"
pnpm exec vitest run "$@"
if [ -s "$OPENAPI_CHECK_FILE" ]; then
  echo "[test] answers that differ from their OpenAPI document (each once, with how often):" >&2
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => JSON.parse(l));
    const seen = new Map();
    for (const l of lines) {
      const key = `${l.service} ${l.operation} ${l.status}: ${l.problems.join("; ")}`;
      seen.set(key, (seen.get(key) ?? 0) + 1);
    }
    for (const [key, n] of seen) console.error(`  ${key} (${n}x)`);' "$OPENAPI_CHECK_FILE"
  exit 1
fi
