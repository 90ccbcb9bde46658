#!/usr/bin/env bash
# The project's test command (`pnpm test`): lint (code and the OpenAPI documents), type-check, look for import cycles
# and dead exports, start the real servers, run every test with every answer checked against its service's OpenAPI
# document (then, on a whole run, the registry benchmark once at a small fleet), stop the servers.
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
the tests with every answer checked against its service's OpenAPI document (a whole run, with no arguments, then runs
the registry benchmark once at 20,000 providers, to see that it runs to its end), and stops the servers. A run that
leaves a new file in the checkout (one git does not ignore, or one in a .data folder) fails: tests write only into
temporary folders.
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
# Files new in the checkout after the run: tests write only into their own temporary folders. Those git does not
# ignore, and those in any `.data/` folder, which git ignores (the programs' default data folders, relative to where
# they run: a test that starts one without a folder of its own writes there).
new_files() {
  {
    git ls-files --others --exclude-standard 2>/dev/null || true
    git ls-files --others --ignored --exclude-standard -- ':(glob)**/.data/**' 2>/dev/null || true
  } | LC_ALL=C sort
}
files_before=$(new_files)
source scripts/test-env.sh
# Every temporary folder the run makes (the tests', the servers' and the platforms' they start) lies in one of the run's
# own, removed when the run ends: a run leaves nothing behind in /tmp either.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-test.XXXXXX")
chmod 1777 "$run_tmp" # as /tmp: the servers' and sandboxes' other users make their files there too
# tsx's cache of compiled files stays where it was (a cold cache makes every process of the run compile anew).
tsx_cache="${TMPDIR:-/tmp}/tsx-$(id -u)"
export TMPDIR="$run_tmp"
# A filesystem a test left mounted there (another device) is not descended into; what cannot go is said, and fails no
# run.
remove_run_tmp() {
  rm -rf --one-file-system "$run_tmp" || echo "[test] could not remove all of $run_tmp" >&2
}
trap 'test_env_down || true; remove_run_tmp' EXIT
{ mkdir -p "$tsx_cache" && ln -s "$tsx_cache" "$run_tmp/tsx-$(id -u)"; } || true
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
# The whole run also runs the registry's benchmark once at a small fleet (its numbers printed, not kept): a change to
# the statements it captures and replays (the heartbeat's parameters) broke it once, and only the next measurement
# found out. It checks that the benchmark runs to its end, not what it measures.
if [ $# -eq 0 ]; then
  echo "[test] the registry benchmark at 20,000 providers (a smoke run; BENCH_ONLY)" >&2
  # On fresh test servers, as `pnpm bench` runs it: the tests leave JetStream streams behind, one of which captures
  # the registry's event subjects, and the registry refuses to start beside it.
  test_env_down
  unset OPENAPI_CHECK_FILE
  test_env_up
  smoke="$TEST_ENV_DIR/bench-registry-smoke"
  if ! BENCH_ONLY=1 BENCH_PROVIDERS=20000 BENCH_SECONDS=1 BENCH_FLEET_SECONDS=2 BENCH_FLEET_RATE=1000 \
    node --import tsx services/provider-registry/bench/run.ts >"$smoke.md" 2>"$smoke.log"; then
    tail -n 40 "$smoke.log" >&2
    echo "[test] the registry benchmark failed (its log: $smoke.log)" >&2
    exit 1
  fi
fi
left=$(LC_ALL=C comm -13 <(printf '%s\n' "$files_before") <(new_files) | sed '/^$/d')
if [ -n "$left" ]; then
  echo "[test] the run left files in the checkout (a test writes only into a temporary folder of its own):" >&2
  sed 's/^/  /' <<<"$left" >&2
  exit 1
fi
