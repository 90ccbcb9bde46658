#!/usr/bin/env bash
# Starts the real servers the tests use, as processes on loopback, and stops
# them again: PostgreSQL (Debian's), NATS with JetStream (Debian's
# nats-server), an S3-compatible server (s3rver) and a recording stand-in for
# the Consul agent; nginx for the gateway's tests; bubblewrap for the daemon's workload sandbox and podman for its containers; promtool and amtool for the monitoring files. Installs what is
# missing (apt-get, as root).
#   source scripts/test-env.sh && test_env_up   # exports TEST_* variables
#   test_env_down
set -euo pipefail

# TEST_PORT_BASE moves every port at once (base+0 .. base+9), so two runs can share a machine.
TEST_ENV_DIR="${TEST_ENV_DIR:-$PWD/.test-env}"
if [ -n "${TEST_PORT_BASE:-}" ]; then
  TEST_PG_PORT=$((TEST_PORT_BASE + 0)) TEST_NATS_PORT=$((TEST_PORT_BASE + 1)) TEST_S3_PORT=$((TEST_PORT_BASE + 2))
  TEST_CONSUL_PORT=$((TEST_PORT_BASE + 3)) TEST_SOLANA_PORT=$((TEST_PORT_BASE + 4))
fi
TEST_PG_PORT="${TEST_PG_PORT:-55432}"
TEST_NATS_PORT="${TEST_NATS_PORT:-54222}"
TEST_S3_PORT="${TEST_S3_PORT:-59000}"
TEST_CONSUL_PORT="${TEST_CONSUL_PORT:-58500}"
TEST_SOLANA_PORT="${TEST_SOLANA_PORT:-58899}"

log() { printf '[test-env] %s\n' "$*" >&2; }

wait_port() { # port name [seconds]
  local deadline=$((SECONDS + ${3:-30}))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    if ((SECONDS > deadline)); then log "$2 did not open port $1"; return 1; fi
    sleep 0.2
  done
}

apt_install() {
  if [ "$(id -u)" != 0 ]; then log "missing $*: install it (apt-get install $*) or run as root"; return 1; fi
  if [ -z "${_APT_UPDATED:-}" ]; then apt-get update -qq >&2; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

kill_pidfile() {
  local f="$1"
  if [ -f "$f" ]; then
    local pid; pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  fi
}

start_postgres() {
  local bin; bin=$(pg_bin)
  if [ -z "$bin" ]; then apt_install postgresql; bin=$(pg_bin); fi
  local d="$TEST_ENV_DIR/pg"
  mkdir -p "$d/sock"
  local as=()
  if [ "$(id -u)" = 0 ]; then chown -R postgres: "$d"; as=(runuser -u postgres --); fi
  "${as[@]}" "$bin/initdb" -D "$d/data" -U postgres --auth=trust -E UTF8 --no-locale --no-sync >/dev/null
  "${as[@]}" "$bin/pg_ctl" -D "$d/data" -l "$d/log" -w -o \
    "-c listen_addresses=127.0.0.1 -p $TEST_PG_PORT -k $d/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=${TEST_PG_SHARED_BUFFERS:-128MB}" \
    start >/dev/null
  export TEST_PG_URL="postgres://postgres@127.0.0.1:$TEST_PG_PORT/postgres"
  log "postgresql on 127.0.0.1:$TEST_PG_PORT"
}

stop_postgres() {
  local bin; bin=$(pg_bin)
  local d="$TEST_ENV_DIR/pg"
  [ -n "$bin" ] && [ -f "$d/data/postmaster.pid" ] || return 0
  local as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  "${as[@]}" "$bin/pg_ctl" -D "$d/data" -m immediate stop >/dev/null 2>&1 || true
}

# NATS in operator mode (decentralized JWT authentication): every client connects with a user credential, as in
# production; TEST_NATS_CREDS is a user with every permission, TEST_NATS_TRUST the keys that issue users.
start_nats() {
  command -v nats-server >/dev/null || apt_install nats-server
  mkdir -p "$TEST_ENV_DIR/nats"
  node --import tsx scripts/dev/nats-operator.ts --dir "$TEST_ENV_DIR/nats" --port "$TEST_NATS_PORT"
  nats-server -c "$TEST_ENV_DIR/nats/nats.conf" >"$TEST_ENV_DIR/nats.log" 2>&1 &
  echo $! >"$TEST_ENV_DIR/nats.pid"
  wait_port "$TEST_NATS_PORT" nats-server
  export TEST_NATS_URL="nats://127.0.0.1:$TEST_NATS_PORT"
  export TEST_NATS_CREDS="$TEST_ENV_DIR/nats/platform.creds"
  export TEST_NATS_TRUST="$TEST_ENV_DIR/nats/trust.json"
  log "nats-server (JetStream, operator mode) on 127.0.0.1:$TEST_NATS_PORT"
}

start_node_server() { # name port [node flags] script args...
  local name="$1" port="$2"; shift 2
  # The Node binary itself, not the shell wrapper pnpm puts on PATH for the project's node package: the PID written
  # below must be the server's, or stopping it would leave the server running.
  # Asked once per shell.
  : "${_TEST_NODE_BIN:=$(node -p 'process.execPath')}"
  "$_TEST_NODE_BIN" --import tsx "$@" >"$TEST_ENV_DIR/$name.log" 2>&1 &
  echo $! >"$TEST_ENV_DIR/$name.pid"
  wait_port "$port" "$name" 60
}

# docker-compose's gateway engine: the tests run deploy/gateway's files with Debian's nginx (tools/gateway/test).
# Installed without starting Debian's own nginx service (a policy-rc.d refusal while the package installs).
ensure_nginx() {
  command -v nginx >/dev/null && return 0
  [ -x /usr/sbin/nginx ] && return 0
  local policy=/usr/sbin/policy-rc.d made=""
  if [ "$(id -u)" = 0 ] && [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made=1; fi
  local rc=0
  apt_install nginx-light || rc=$?
  if [ -n "$made" ]; then rm -f "$policy"; fi
  if [ "$rc" != 0 ]; then return "$rc"; fi
  log "nginx $(/usr/sbin/nginx -v 2>&1 | sed 's/.*\///')"
}

# The provider daemon's workload sandbox (tools/provider-daemon/src/workloads/): Debian's bubblewrap, slirp4netns, and
# setpriv and prlimit (util-linux) that start it as the workload's own user with its limits.
ensure_bwrap() {
  if ! command -v bwrap >/dev/null; then apt_install bubblewrap; fi
  # A workload allowed the network gets a user-mode one that cannot reach the host's loopback.
  if ! command -v slirp4netns >/dev/null; then apt_install slirp4netns; fi
  for tool in setpriv prlimit; do command -v "$tool" >/dev/null || apt_install util-linux; done
  # A daemon that is not root (test/unprivileged-reach.test.ts) enters its sandboxes through Perl.
  command -v perl >/dev/null || apt_install perl-base
  # ... and gives one the network through the TUN device, which Debian's udev makes everyone's (mode 0666); a machine
  # without udev (a container) may have made it root's alone.
  if [ "$(id -u)" = 0 ] && [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
    chmod 0666 /dev/net/tun && log "/dev/net/tun: mode 0666, as Debian's udev makes it"
  fi
  log "$(bwrap --version)"
}

# Reach's end-to-end tests (tools/provider-daemon/test/reach-ports.test.ts): OpenSSH's own client (`ssh`, `scp`,
# `ssh-keygen`) as renters run it, the `sftp-server` a workload's `scp` runs (the sandbox sees the machine's /usr), and
# Debian's python3 for a workload's `python3 -m http.server`, and tmux to drive a terminal. No SSH server is installed
# or started.
ensure_reach_tools() {
  command -v ssh >/dev/null && command -v scp >/dev/null || apt_install openssh-client
  [ -x /usr/lib/openssh/sftp-server ] || apt_install openssh-sftp-server
  [ -x /usr/bin/python3 ] || apt_install python3
  # A terminal driven as a person would: tmux (resize, Ctrl-C).
  command -v tmux >/dev/null || apt_install tmux
}

# The provider daemon's container mode (src/workloads/container.ts): Debian's podman with runc, and a test image made
# here from busybox-static (no registry is reachable). Where podman's defaults cannot run a container (no systemd
# cgroups, as on these machines) the runtime flags that can are exported for the tests.
TEST_CONTAINER_IMAGE=localhost/gpu-platform-test:2
ensure_podman() {
  command -v podman >/dev/null || apt_install podman
  command -v runc >/dev/null || apt_install runc
  # The containers' first process (podman --init), which passes the stop signal on.
  command -v catatonit >/dev/null || apt_install catatonit
  dpkg -s busybox-static >/dev/null 2>&1 || apt_install busybox-static
  if ! podman image exists "$TEST_CONTAINER_IMAGE"; then
    local root
    root=$(mktemp -d)
    mkdir -p "$root/bin" && cp /bin/busybox "$root/bin/busybox"
    for tool in sh cat ls id env sleep head tr touch echo true nc wget awk seq; do ln -s busybox "$root/bin/$tool"; done
    # With a volume of its own, as many images have (the daemon must not give it one on the host's disk).
    tar -C "$root" -c . | podman import --quiet --change 'VOLUME /data' - "$TEST_CONTAINER_IMAGE" >/dev/null
    rm -rf "$root"
  fi
  local args
  for args in "" "--runtime runc --cgroup-manager cgroupfs"; do
    # shellcheck disable=SC2086
    if podman $args run --rm --pull=never --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
      --memory 256m --memory-swap 256m --pids-limit 64 \
      "$TEST_CONTAINER_IMAGE" /bin/busybox true >/dev/null 2>&1; then
      export TEST_CONTAINER_RUNTIME_ARGS="$args" TEST_CONTAINER_IMAGE
      log "$(podman --version) runs containers${args:+ with $args}"
      return 0
    fi
  done
  # The other suites need none of it: only the container tests fail, with this line to say why.
  log "podman cannot run a container here: $(podman run --rm --pull=never "$TEST_CONTAINER_IMAGE" /bin/busybox true 2>&1 | tail -1)"
  return 0
}

# promtool and amtool, which check the monitoring files (tests/alert-rules.test.ts: `promtool check rules` and
# `promtool test rules` on deploy/prometheus; tests/deploy.test.ts: `promtool check config`, `amtool check-config`):
# Debian's prometheus and prometheus-alertmanager packages, installed without starting their services (a policy-rc.d
# refusal, as for nginx).
ensure_promtool() {
  local missing=()
  command -v promtool >/dev/null || missing+=(prometheus)
  command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
  [ "${#missing[@]}" = 0 ] && return 0
  local policy=/usr/sbin/policy-rc.d made=""
  if [ "$(id -u)" = 0 ] && [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made=1; fi
  local rc=0
  apt_install --no-install-recommends "${missing[@]}" || rc=$?
  if [ -n "$made" ]; then rm -f "$policy"; fi
  if [ "$rc" != 0 ]; then return "$rc"; fi
  log "$(promtool --version 2>&1 | head -1); $(amtool --version 2>&1 | head -1)"
}

test_env_up() {
  ensure_nginx
  ensure_bwrap
  ensure_podman
  ensure_reach_tools
  ensure_promtool
  test_env_down
  rm -rf "$TEST_ENV_DIR"
  mkdir -p "$TEST_ENV_DIR"
  start_postgres
  start_nats
  # s3rver encrypts list continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
  # It checks signatures (AWS SigV4) as S3 does; TEST_S3_ALLOW_ANONYMOUS=1 also lets unsigned requests in (a benchmark's
  # reference relay).
  start_node_server s3 "$TEST_S3_PORT" --openssl-legacy-provider scripts/dev/s3-server.ts --port "$TEST_S3_PORT" --dir "$TEST_ENV_DIR/s3" \
    ${TEST_S3_ALLOW_ANONYMOUS:+--allow-anonymous}
  export TEST_S3_ENDPOINT="http://127.0.0.1:$TEST_S3_PORT" TEST_S3_ACCESS_KEY=S3RVER TEST_S3_SECRET_KEY=S3RVER
  log "s3rver on 127.0.0.1:$TEST_S3_PORT"
  start_node_server consul "$TEST_CONSUL_PORT" scripts/dev/consul-stub.ts --port "$TEST_CONSUL_PORT"
  export TEST_CONSUL_ADDR="127.0.0.1:$TEST_CONSUL_PORT"
  log "consul stand-in on 127.0.0.1:$TEST_CONSUL_PORT"
  # PubSub (WebSocket) listens on the RPC port + 1, where web3.js looks for it.
  start_node_server solana "$TEST_SOLANA_PORT" tools/solana-localnet/src/server.ts --port "$TEST_SOLANA_PORT"
  export TEST_SOLANA_RPC_URL="http://127.0.0.1:$TEST_SOLANA_PORT" TEST_SOLANA_WS_URL="ws://127.0.0.1:$((TEST_SOLANA_PORT + 1))"
  log "solana localnet on 127.0.0.1:$TEST_SOLANA_PORT"
}

test_env_down() {
  for name in solana consul s3 nats; do kill_pidfile "$TEST_ENV_DIR/$name.pid"; done
  stop_postgres
}
