#!/usr/bin/env bash
# The workload sandbox on a machine with real NVIDIA GPUs, as recorded in the daemon's README ("On a real GPU"):
# check-gpus (bundled with its Node) under each lease, with a CUDA program built here run inside too, and the
# kernel's memory limit on a sandbox (its control group).
# Run from the repository root with .devcheck/ made by bundle-check-gpus.sh beside it (the machine needs no Node, no
# bubblewrap and none of the repository's dependencies); writes its log and JSON report to $OUT (default
# /tmp/device-check).
set -u
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
D=$PWD/.devcheck
step() { printf '\n== %s\n' "$*"; }
step machine
uname -a; grep PRETTY /etc/os-release; id
step gpus
nvidia-smi -L; nvidia-smi --query-gpu=index,uuid,pci.bus_id,driver_version --format=csv
ls -l /dev/nvidia* ; cat /proc/driver/nvidia/gpus/*/information 2>&1 | head -20
command -v nvidia-smi nvcc prlimit setpriv nsenter docker podman nvidia-ctk
env | grep -E '^(LD_LIBRARY_PATH|PATH|CUDA|NVIDIA)' ; ldconfig -p | grep -E 'libnvidia-ml|libcuda\.' ; cat /etc/ld.so.conf.d/* 2>/dev/null
cat /proc/self/cgroup; mount | grep cgroup; cat /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/cgroup.subtree_control 2>&1
cat /proc/sys/user/max_user_namespaces /proc/sys/kernel/unprivileged_userns_clone /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>&1
step tools
NODE=$(command -v node || true)
if [ -z "$NODE" ] || ! "$NODE" -e 'process.exit(+process.versions.node.split(".")[0] < 20)'; then
  xz -dc "$D/node.xz" > /tmp/node && chmod 755 /tmp/node && NODE=/tmp/node
fi
"$NODE" --version
BWRAP=$(command -v bwrap || true)
if [ -z "$BWRAP" ]; then dpkg -x "$D/bubblewrap.deb" /opt/bwrap && BWRAP=/opt/bwrap/usr/bin/bwrap; fi
"$BWRAP" --version
PROBE=/usr/local/bin/cuda-probe
nvcc -o "$PROBE" tools/provider-daemon/scripts/cuda-probe.cu && "$PROBE"
printf 'workloads:\n  run_dir: /var/lib/gpu-check\n  bwrap_path: %s\n' "$BWRAP" > /tmp/check.yaml
check() {
  DAEMON_CONFIG_FILE=/tmp/check.yaml "$NODE" "$D/check-gpus.mjs" --json -- "$PROBE" > "$OUT/report$1.json"
  local rc=$?
  DAEMON_CONFIG_FILE=/tmp/check.yaml "$NODE" "$D/check-gpus.mjs" -- "$PROBE"
  echo "check-gpus exit $rc"
  return $rc
}
step "check-gpus as root (workloads as uid 200000)"
check ""
rc=$?
if [ $rc -ne 0 ] && [ -n "${LD_LIBRARY_PATH:-}" ]; then
  step "again with the driver's libraries registered with ldconfig (the sandbox clears LD_LIBRARY_PATH)"
  tr ':' '\n' <<< "$LD_LIBRARY_PATH" > /etc/ld.so.conf.d/zz-gpu-check.conf && ldconfig
  check "-ldconfig"
fi
