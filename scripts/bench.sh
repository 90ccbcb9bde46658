#!/usr/bin/env bash
# `pnpm bench <name>`: starts the real servers (as for the tests), runs the
# named benchmark, which writes its section of docs/benchmarks.md.
#   names: storage, storage-listing, auth, registry, billing, billing-usage, gateway, startup
# `billing` runs the ledger benchmark, then the usage one; `billing-usage` the usage one alone.
# `startup` times `pnpm start` itself, which brings its own servers: no test servers for it.
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:?usage: pnpm bench <storage|storage-listing|auth|registry|billing|billing-usage|gateway|startup> [args]}"
shift
if [ "$name" = startup ]; then exec "${BENCH_NODE:-node}" --import tsx scripts/bench-startup.ts "$@"; fi
case "$name" in
  # The reference relay of the storage benchmark reads from s3rver without signing (bench/bare-relay.ts).
  storage) file=services/storage/bench/run.ts; export TEST_S3_ALLOW_ANONYMOUS=1 ;;
  storage-listing) file=services/storage/bench/listing.ts ;;
  auth) file=services/auth/bench/run.ts ;;
  # A million providers' indexes outgrow PostgreSQL's default 128 MB of shared buffers: size them for the fleet.
  registry) file=services/provider-registry/bench/run.ts; export TEST_PG_SHARED_BUFFERS="${TEST_PG_SHARED_BUFFERS:-2GB}" ;;
  billing) file=services/billing/bench/run.ts ;;
  billing-usage) file=services/billing/bench/usage.ts ;;
  gateway) file=tools/gateway/bench/run.ts ;;
  *) echo "unknown benchmark: $name" >&2; exit 2 ;;
esac
export TEST_ENV_DIR="${TEST_ENV_DIR:-$PWD/.test-env/bench}"
source scripts/test-env.sh
trap test_env_down EXIT
test_env_up
# BENCH_NODE runs the benchmark (and the processes it starts with its own Node) on another Node binary, e.g. the
# machine's /usr/bin/node beside the project's pinned one, for a side-by-side comparison.
"${BENCH_NODE:-node}" --import tsx "$file" "$@"
