# One image recipe for every service; the build argument names the directory under services/:
#   docker build --build-arg SERVICE=auth --build-arg PORT=8000 -t gpu-platform/auth .
# docker-compose.yml builds the four services this way (tests/deploy.test.ts checks it).
#
# Stage "build" installs the service's production dependencies and those of the workspace packages it uses (the
# lockfile as committed, nothing resolved anew), with the compilers that native build scripts need; the runtime stage
# copies only the result, runs as the unprivileged `node` user and has no package manager or compiler in it.
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
# The pnpm of package.json's `packageManager` (tests/deploy.test.ts keeps the two in step).
ARG PNPM_VERSION=10.34.9
RUN apt-get update \
  && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/* \
  && npm install -g "pnpm@${PNPM_VERSION}"
WORKDIR /app
# Dependencies first, from the lockfile alone, so a change to the code reuses this layer.
COPY pnpm-lock.yaml pnpm-workspace.yaml package.json ./
RUN pnpm fetch --prod
COPY . .
ARG SERVICE
RUN test -n "${SERVICE}" && test -f "services/${SERVICE}/src/server.ts" \
  || { echo "build with --build-arg SERVICE=<a directory under services/>, got '${SERVICE}'" >&2; exit 1; }
RUN pnpm install --offline --frozen-lockfile --prod --filter "{./services/${SERVICE}}..."
# The command line is the package's `start` script (storage's carries its V8 flags), run by node itself.
RUN node -p "require('./services/${SERVICE}/package.json').scripts.start" > start-command \
  && grep -q '^node .*src/server.ts$' start-command \
  || { echo "services/${SERVICE}: the start script must be 'node ... src/server.ts'" >&2; exit 1; }

FROM ${NODE_IMAGE}
ARG SERVICE
# The port the service listens on (its contract port: auth 8000, storage 8001, provider-registry 8002, billing 8003).
ARG PORT=8000
ENV NODE_ENV=production \
  PORT=${PORT} \
  STORAGE_CONFIG_FILE=/data/config.yaml
WORKDIR /app
COPY --from=build /app/package.json /app/tsconfig.base.json /app/start-command ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/packages ./packages
COPY --from=build /app/services/${SERVICE} ./services/${SERVICE}
# /data: files a service writes (storage's default configuration file, named above); .data: embedded PGlite
# databases, used when no DATABASE_URL is given.
RUN mkdir -p /data "services/${SERVICE}/.data" && chown node:node /data "services/${SERVICE}/.data"
WORKDIR /app/services/${SERVICE}
USER node
EXPOSE ${PORT}
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+process.env.PORT+'/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["/bin/sh", "-c", "exec $(cat /app/start-command)"]
