#!/usr/bin/env bash
# `pnpm bench <name>`: starts the real servers (as for the tests), runs the
# named benchmark, which writes its section of docs/benchmarks.md.
#   names: storage, storage-listing, auth, registry, billing, billing-usage, gateway, workloads, reach, jobs, spot, startup
# `billing` runs the ledger benchmark, then the usage one; `billing-usage` the usage one alone.
# `startup` times `pnpm start` itself, which brings its own servers: no test servers for it.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  cat <<'USAGE'
usage: pnpm bench <storage|storage-listing|auth|registry|billing|billing-usage|gateway|workloads|reach|jobs|spot|startup> [args]

Starts the real test servers (as for the tests; not for startup), runs the named benchmark and writes its section
of docs/benchmarks.md (BENCH_ONLY=1: prints it). `pnpm bench <name> --help` says what one measures and takes.
USAGE
}
# The file of each benchmark: its opening comment is its --help.
bench_file() {
  case "$1" in
    storage) echo services/storage/bench/run.ts ;;
    storage-listing) echo services/storage/bench/listing.ts ;;
    auth) echo services/auth/bench/run.ts ;;
    registry) echo services/provider-registry/bench/run.ts ;;
    billing) echo services/billing/bench/run.ts ;;
    billing-usage) echo services/billing/bench/usage.ts ;;
    gateway) echo tools/gateway/bench/run.ts ;;
    workloads) echo tools/provider-daemon/bench/workloads.ts ;;
    reach) echo tools/provider-daemon/bench/reach.ts ;;
    jobs) echo tools/provider-daemon/bench/jobs.ts ;;
    spot) echo tools/provider-daemon/bench/spot.ts ;;
    startup) echo scripts/bench-startup.ts ;;
    *) return 1 ;;
  esac
}
name="${1:-}"
case "$name" in
  "" ) usage >&2; exit 2 ;;
  -h | --help) usage; exit 0 ;;
esac
shift
for arg in "$@"; do
  case "$arg" in
    --) break ;;
    -h | --help)
      if ! file=$(bench_file "$name"); then echo "unknown benchmark: $name" >&2; exit 2; fi
      # startup answers for itself; the others' usage is their opening comment.
      if [ "$name" = startup ]; then exec "${BENCH_NODE:-node}" --import tsx scripts/bench-startup.ts --help; fi
      echo "usage: pnpm bench $name"
      echo
      # The file's opening comment, without its /** and */.
      awk '/^\/\*\*/ { inside = 1; next } inside && /^ \*\// { exit } inside { sub(/^ \* ?/, ""); print }' "$file"
      exit 0
      ;;
  esac
done
if [ "$name" = startup ]; then exec "${BENCH_NODE:-node}" --import tsx scripts/bench-startup.ts "$@"; fi
if ! file=$(bench_file "$name"); then echo "unknown benchmark: $name" >&2; exit 2; fi
# The storage benchmarks run the service compiled, as `pnpm start` runs it (`pnpm build`, scripts/lib/build.ts).
case "$name" in
  storage | storage-listing) "${BENCH_NODE:-node}" --import tsx scripts/build.ts ;;
esac
case "$name" in
  # The reference relay of the storage benchmark reads from s3rver without signing (bench/bare-relay.ts).
  storage) export TEST_S3_ALLOW_ANONYMOUS=1 ;;
  # A million providers' indexes outgrow PostgreSQL's default 128 MB of shared buffers: size them for the fleet.
  registry) export TEST_PG_SHARED_BUFFERS="${TEST_PG_SHARED_BUFFERS:-2GB}" ;;
  # So do the usage benchmark's 100,000 sessions with their holds and a million usage records and more.
  billing | billing-usage) export TEST_PG_SHARED_BUFFERS="${TEST_PG_SHARED_BUFFERS:-2GB}" ;;
esac
export TEST_ENV_DIR="${TEST_ENV_DIR:-$PWD/.test-env/bench}"
source scripts/test-env.sh
# PostgreSQL's shared buffers on 2 MB huge pages, as its documentation advises for gigabytes of them (and the
# registry's README for a million machines): a million machines' random reads otherwise miss the TLB at nearly every
# buffer (the registry's heartbeat: PostgreSQL's CPU a tenth lower). PostgreSQL takes them by itself (`huge_pages`
# is `try` by default) when the kernel has them reserved, which needs root: the pages the buffers need are reserved
# here for the run and given back after it; where they cannot be, PostgreSQL runs on regular pages, and the report's
# machine line says which (bench-kit's machineLine).
reserved_huge_pages=""
reserve_huge_pages() {
  local size="${TEST_PG_SHARED_BUFFERS%% *}" mb
  case "$size" in
    *GB) mb=$(( ${size%GB} * 1024 )) ;;
    *MB) mb=${size%MB} ;;
    *) return 0 ;;
  esac
  # The buffers, and a tenth more and 64 MB for the rest of PostgreSQL's shared memory (locks, connections).
  local want=$(( (mb + mb / 10 + 64) / 2 )) have
  have=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null) || return 0
  [ "$have" -ge "$want" ] && return 0
  if echo "$want" 2>/dev/null >/proc/sys/vm/nr_hugepages; then
    reserved_huge_pages="$have"
    echo "[bench] reserved $(cat /proc/sys/vm/nr_hugepages) huge pages of 2 MB for PostgreSQL (was $have)" >&2
  else
    echo "[bench] could not reserve huge pages (not root?): PostgreSQL runs on regular pages" >&2
  fi
}
bench_down() {
  test_env_down
  if [ -n "$reserved_huge_pages" ]; then echo "$reserved_huge_pages" >/proc/sys/vm/nr_hugepages 2>/dev/null || true; fi
}
case "$name" in
  registry | billing | billing-usage) reserve_huge_pages ;;
esac
trap bench_down EXIT
test_env_up
# BENCH_NODE runs the benchmark (and the processes it starts with its own Node) on another Node binary, e.g. the
# machine's /usr/bin/node beside the project's pinned one, for a side-by-side comparison.
"${BENCH_NODE:-node}" --import tsx "$file" "$@"
