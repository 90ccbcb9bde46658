# One image recipe for every service; the build argument names the directory under services/:
#   docker build --build-arg SERVICE=auth --build-arg PORT=8000 -t ghcr.io/gpu-platform/auth .
# `pnpm images` (scripts/build-images.sh) builds every image docker-compose.yml and deploy/k8s use this way
# (tests/deploy.test.ts checks the lists agree).
#
# Stage "build" runs scripts/prepare-image.sh: the workspace's dependencies from the lockfile as committed (nothing
# resolved anew), the service compiled to JavaScript in each package's dist/ with source maps (the builder
# `pnpm start` uses, scripts/lib/build.ts), the command line to run it, then only the production dependencies. The
# runtime stage copies the result, runs the compiled program with plain node as the unprivileged `node` user, and has
# no package manager, compiler or TypeScript loader in it. tests/deploy.test.ts runs the build stage's script in a
# copy of the tree and starts the service from what the runtime stage copies.
ARG NODE_IMAGE=node:24-bookworm-slim

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
RUN pnpm fetch
COPY . .
ARG SERVICE
RUN sh scripts/prepare-image.sh "${SERVICE}"

FROM ${NODE_IMAGE}
ARG SERVICE
# The port the service listens on (its contract port: auth 8000, storage 8001, provider-registry 8002, billing 8003).
ARG PORT=8000
ENV NODE_ENV=production \
  PORT=${PORT} \
  STORAGE_CONFIG_FILE=/data/config.yaml
WORKDIR /app
COPY --from=build /app/package.json /app/start-command ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/packages ./packages
COPY --from=build /app/services/${SERVICE} ./services/${SERVICE}
# /data: files a service writes (storage's default configuration file, named above); /nats: the platform's NATS
# set-up (auth writes it with NATS_SETUP_DIR, docker-compose; the others read it); .data: embedded PGlite databases,
# used when no DATABASE_URL is given.
RUN mkdir -p /data /nats/server /nats/creds "services/${SERVICE}/.data" \
  && chown node:node /data /nats /nats/server /nats/creds "services/${SERVICE}/.data"
WORKDIR /app/services/${SERVICE}
USER node
EXPOSE ${PORT}
# Healthy while it can serve (its readiness, as Consul's check and Kubernetes' readiness probe): an outage it rides out
# (NATS) makes /health 503 but must not have an orchestrator that acts on this check replace every container.
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+process.env.PORT+'/health/ready').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# start-command: `node <the package's V8 flags> --enable-source-maps dist/src/server.js` (scripts/lib/image.ts).
CMD ["/bin/sh", "-c", "exec $(cat /app/start-command)"]
