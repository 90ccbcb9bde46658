/**
 * `pnpm --filter @gpu/provider-daemon check-gpus [--json] [--image <ref>] [-- <argv>]`: proves on this machine that a
 * workload sees exactly the GPUs it leased (in the sandbox, and with `--image` in a container of that image too), and
 * that the kernel holds a sandbox to its memory and its disk (workloads/check.ts), with the daemon's configuration
 * (`DAEMON_CONFIG_FILE`: its GPU source, bubblewrap, container and workload settings; no credentials). Exit status 0
 * when every lease saw exactly its GPUs and the memory and disk limits held, 1 when not, 2 when the check could not
 * run (with `--json`, `{"ok": false, "ran": false, "error": ...}` on standard output then: a machine without a driver
 * answers JSON too).
 */
import { loadDaemonConfig } from './config.ts';
import { gpuSource } from './gpu/source.ts';
import { checkGpuIsolation, type GpuCheckReport } from './workloads/check.ts';

function table(report: GpuCheckReport): string {
  const lines = [
    `GPU source: ${report.source}; workloads run as ${report.uid === null ? "the daemon's user" : `uid ${report.uid}`}`,
    ...report.gpus.map((g) => `  GPU ${g.index}: ${g.name} ${g.uuid} (${g.device})`),
    '',
  ];
  for (const lease of report.leases) {
    const name = lease.leased.length === 0 ? 'none' : lease.leased.join(',');
    lines.push(`${lease.ok ? 'ok  ' : 'FAIL'} ${lease.mode}, leased [${name}]`);
    lines.push(
      `       device nodes inside: [${lease.devices.seen.join(', ')}] (leased: [${lease.devices.expected.join(', ')}])`,
    );
    for (const e of lease.errors) lines.push(`       ${e}`);
    if (lease.nvidiaSmi) {
      const { seen, expected, error } = lease.nvidiaSmi;
      lines.push(
        `       nvidia-smi inside: [${seen.join(', ')}] (leased: [${expected.join(', ')}])${error ? `; ${error}` : ''}`,
      );
    }
    if (lease.command) {
      lines.push(`       command: exit ${lease.command.exitCode}`);
      for (const l of `${lease.command.stdout}${lease.command.stderr}`.trimEnd().split('\n'))
        lines.push(`         ${l}`);
    }
  }
  if (report.memory)
    lines.push(
      `${report.memory.ok ? 'ok  ' : 'FAIL'} memory limit (${report.memory.cgroup ?? 'none'}): ${report.memory.detail}`,
    );
  lines.push(`${report.disk.ok ? 'ok  ' : 'FAIL'} disk allowance (${report.disk.kind}): ${report.disk.detail}`);
  lines.push(
    '',
    report.ok
      ? 'every lease saw exactly its GPUs, and the kernel holds a sandbox to its memory and its disk'
      : 'a lease saw GPUs it did not lease or not its own, or the kernel does not hold a sandbox to its memory or its disk',
  );
  return lines.join('\n');
}

const args = process.argv.slice(2);
const dash = args.indexOf('--');
const flags = dash < 0 ? args : args.slice(0, dash);
const command = dash < 0 ? undefined : args.slice(dash + 1);
const imageAt = flags.indexOf('--image');
const image = imageAt < 0 ? undefined : flags[imageAt + 1];
try {
  if (imageAt >= 0 && !image) throw new Error('--image takes an image reference');
  const config = loadDaemonConfig();
  const report = await checkGpuIsolation({
    config,
    gpus: gpuSource(config.gpu),
    ...(command ? { command } : {}),
    ...(image ? { image } : {}),
  });
  console.log(flags.includes('--json') ? JSON.stringify(report, null, 2) : table(report));
  process.exitCode = report.ok ? 0 : 1;
} catch (err) {
  const message = (err as Error).message;
  console.error(`check-gpus: ${message}`);
  // A program reading --json reads why too: no driver, no bubblewrap, a configuration it cannot use.
  if (flags.includes('--json')) console.log(JSON.stringify({ ok: false, ran: false, error: message }, null, 2));
  process.exitCode = 2;
}
