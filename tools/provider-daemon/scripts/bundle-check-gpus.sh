#!/usr/bin/env bash
# Makes .devcheck/ at the repository root: check-gpus as one file (check-gpus.mjs), the project's Node (node.xz) and
# Debian's bubblewrap (bubblewrap.deb), for a machine with GPUs and without this repository's dependencies
# (device-check.sh runs them there). Run from the repository root after `pnpm install`.
set -euo pipefail
mkdir -p .devcheck
esbuild=$(find node_modules/.pnpm -path '*/node_modules/esbuild/bin/esbuild' | head -1)
"$esbuild" tools/provider-daemon/src/check-gpus.ts --bundle --platform=node --format=esm --target=node20 \
  --outfile=.devcheck/check-gpus.mjs --log-level=warning \
  --banner:js="import{createRequire as __cr}from'module';const require=__cr(import.meta.url);"
node=$(find node_modules/.pnpm -path '*/node_modules/node/bin/node' | head -1)
xz -T0 -6 -c "$node" > .devcheck/node.xz
(cd .devcheck && apt-get download bubblewrap 2>/dev/null && mv bubblewrap_*.deb bubblewrap.deb)
ls -l .devcheck
