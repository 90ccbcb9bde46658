#!/usr/bin/env bash
# `pnpm lint:api`: the four services' committed OpenAPI documents (each equal to what its service serves: the services'
# openapi-document tests) under two linters nobody here wrote: Redocly's recommended rules (redocly.yaml) and
# Spectral's `spectral:oas` with the OWASP API Security ruleset (@stoplight/spectral-owasp-ruleset; .spectral.yaml,
# where every rule switched off or narrowed says why). Any error fails; warnings are counted by rule and printed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") ;;
  -h | --help)
    echo "usage: pnpm lint:api"
    echo
    echo "Lints the four services' OpenAPI documents with Redocly's recommended rules (redocly.yaml) and Spectral's"
    echo "spectral:oas (.spectral.yaml). Any error fails; warnings are counted by rule. Takes no arguments."
    exit 0
    ;;
  *) echo "pnpm lint:api: takes no arguments, got $* (pnpm lint:api --help shows how)" >&2; exit 2 ;;
esac
# No telemetry or update check (the machines are offline); its Node 20 notice is left out of what is printed.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
docs=(services/auth/openapi.json services/storage/openapi.json services/provider-registry/openapi.json services/billing/openapi.json)
status=0
for doc in "${docs[@]}"; do
  if ! out=$(pnpm -s exec redocly lint --config redocly.yaml --format=summary "$doc" 2>&1); then
    grep -v '[╔║╚]' <<<"$out"
    status=1
  fi
  redocly=$(grep -E '^(error|warning) ' <<<"$out" | sed -E 's/ +/ /g' | paste -sd ',' - | sed 's/,/, /g')
  if ! sout=$(pnpm -s exec spectral lint "$doc" -r .spectral.yaml -f json --quiet 2>/dev/null); then
    pnpm -s exec spectral lint "$doc" -r .spectral.yaml -D || true
    status=1
  fi
  # The findings go through stdin: a document's JSON may pass the limit of one command-line argument (128 KiB).
  spectral=$(node -e '
    const r = JSON.parse(require("node:fs").readFileSync(0, "utf8") || "[]"), by = {};
    const sev = ["error", "warning", "info", "hint"];
    for (const p of r) by[`${sev[p.severity]} ${p.code}`] = (by[`${sev[p.severity]} ${p.code}`] ?? 0) + 1;
    console.log(Object.entries(by).map(([k, n]) => `${k}: ${n}`).join(", "));' <<<"$sout")
  echo "[lint:api] $doc: redocly ${redocly:-clean}; spectral ${spectral:-clean}"
done
exit $status
