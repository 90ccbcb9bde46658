#!/bin/sh
# usage: sh scripts/prepare-image.sh <service>
# The build stage of the Dockerfile, runnable outside Docker (tests/deploy.test.ts runs it in a copy of the tree):
# 1. installs every workspace dependency from the lockfile, offline (the Dockerfile's `pnpm fetch` filled the store);
# 2. compiles the service and the workspace code it imports into each package's dist/, with source maps, as
#    `pnpm start` does (scripts/build-service.ts), and writes the image's command line to start-command;
# 3. leaves only the production dependencies of the service and of the workspace packages it uses: no compiler,
#    no tsx, no test tools go into the image.
set -eu
case "${1:-}" in
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
esac
SERVICE="${1:-}"
if [ -z "$SERVICE" ] || [ ! -f "services/$SERVICE/src/server.ts" ]; then
  echo "prepare-image: name a service (a folder under services/ with src/server.ts), got '$SERVICE'" >&2
  exit 1
fi
pnpm install --offline --frozen-lockfile
node --import tsx scripts/build-service.ts "$SERVICE"
rm -rf node_modules packages/*/node_modules services/*/node_modules tools/*/node_modules
pnpm install --offline --frozen-lockfile --prod --filter "{./services/$SERVICE}..."
