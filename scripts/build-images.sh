#!/usr/bin/env bash
# usage: pnpm images [--list | --dry-run] [--push]
# Builds every image docker-compose.yml and the Kubernetes manifests (deploy/k8s) name (`pnpm images`):
#   $IMAGE_REPO/<service>:$IMAGE_TAG   each service under services/, from the root Dockerfile (SERVICE, PORT)
#   $IMAGE_REPO/solana-setup:$IMAGE_TAG   compose's chain set-up, from tools/solana-localnet/Dockerfile
#   $IMAGE_REPO/gateway-telemetry:$IMAGE_TAG   compose's receiver of its nginx gateway's telemetry, from
#                                           tools/gateway/Dockerfile
# IMAGE_REPO defaults to ghcr.io/gpu-platform, IMAGE_TAG to latest (the k8s overlays deploy `main` and `v0.1.0`).
#
#   pnpm images                 build them all with docker, from the repository's root
#   pnpm images --push          build, then push each (after `docker login ghcr.io`)
#   pnpm images --list          print the images it builds, one a line
#   pnpm images --dry-run       print the docker commands instead of running them
# tests/deploy.test.ts checks that the list is exactly the images compose and the manifests name.
set -euo pipefail
cd "$(dirname "$0")/.."

REPO="${IMAGE_REPO:-ghcr.io/gpu-platform}"
TAG="${IMAGE_TAG:-latest}"
MODE=build
PUSH=0
for arg in "$@"; do
  case "$arg" in
    -h | --help)
      # The opening comment.
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0
      ;;
    --list) MODE=list ;;
    --dry-run) MODE=dry-run ;;
    --push) PUSH=1 ;;
    *) echo "build-images: unknown argument $arg (--list, --dry-run, --push, --help)" >&2; exit 2 ;;
  esac
done

# Each service's contract port (the image's PORT and EXPOSE).
declare -A PORTS=([auth]=8000 [storage]=8001 [provider-registry]=8002 [billing]=8003)

# One line per image: <image> <docker build arguments...>
images=()
for dir in services/*/; do
  service="$(basename "$dir")"
  [ -f "services/$service/src/server.ts" ] || continue
  port="${PORTS[$service]:-}"
  if [ -z "$port" ]; then echo "build-images: no port for services/$service: add it to PORTS" >&2; exit 1; fi
  images+=("$REPO/$service:$TAG -f Dockerfile --build-arg SERVICE=$service --build-arg PORT=$port")
done
images+=("$REPO/solana-setup:$TAG -f tools/solana-localnet/Dockerfile")
images+=("$REPO/gateway-telemetry:$TAG -f tools/gateway/Dockerfile")

for line in "${images[@]}"; do
  read -r -a words <<<"$line"
  image="${words[0]}"
  build=(docker build "${words[@]:1}" -t "$image" .)
  case "$MODE" in
    list) echo "$image" ;;
    dry-run)
      echo "${build[*]}"
      if [ "$PUSH" = 1 ]; then echo "docker push $image"; fi
      ;;
    build)
      echo "[images] $image" >&2
      "${build[@]}"
      if [ "$PUSH" = 1 ]; then docker push "$image"; fi
      ;;
  esac
done
