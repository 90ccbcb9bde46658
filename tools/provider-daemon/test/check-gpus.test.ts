/**
 * check-gpus, the machine's own proof that a workload sees exactly the GPUs it leased, against the real bubblewrap on
 * a simulated 4-GPU machine (the stand-in device files where the nodes would be): as an operator runs it, through
 * its command line, and with a command of the operator's under each lease.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { daemonConfigSchema } from '../src/config.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { checkGpuIsolation, type GpuCheckReport } from '../src/workloads/check.ts';
import { containerSettings, testImage } from './support/containers.ts';

const root = mkdtempSync(path.join(tmpdir(), 'check-gpus-test-'));
// The workloads' users pass through to their work directories (as a daemon's run directory's parents must let them).
chmodSync(root, 0o711);
afterAll(() => rmSync(root, { recursive: true, force: true }));
const daemonDir = path.resolve(import.meta.dirname, '..');

const settings = {
  gpu: {
    source: 'simulated',
    simulated_gpus: Array.from({ length: 4 }, () => ({ name: 'NVIDIA H200', memory_total_mib: 143771 })),
  },
  workloads: { run_dir: path.join(root, 'run') },
};

describe('check-gpus', () => {
  it('runs a sandbox per lease and shows each one exactly its GPUs, and a command of the operator under each', async () => {
    const config = daemonConfigSchema.parse(settings);
    const report = await checkGpuIsolation({ config, gpus: gpuSource(config.gpu), command: ['cat', '/dev/nvidia2'] });
    expect(report.ok).toBe(true);
    // Each GPU alone, none, all.
    expect(report.leases.map((l) => l.leased)).toEqual([[0], [1], [2], [3], [], [0, 1, 2, 3]]);
    for (const lease of report.leases) {
      expect(lease.devices.seen.sort()).toEqual(lease.leased.map((i) => `nvidia${i}`));
      expect(lease.nvidiaSmi).toBeNull();
      // The operator's command reads GPU 2's node only where GPU 2 is leased.
      if (lease.leased.includes(2)) expect(lease.command).toMatchObject({ exitCode: 0, stdout: /simulated GPU 2/ });
      else expect(lease.command).toMatchObject({ exitCode: 1, stderr: /No such file/ });
    }
    // The kernel held a sandbox to its memory (this machine's control groups).
    expect(report.memory).toMatchObject({ ok: true, cgroup: expect.stringMatching(/^cgroup v[12] at /) });
    // And to its disk allowance (a filesystem of its own: the write past 16 MiB refused).
    expect(report.disk).toMatchObject({
      kind: 'filesystem',
      ok: true,
      detail: expect.stringMatching(/refused by the kernel/),
    });
    // Nothing of the check is left in the run directory.
    expect(spawnSync('ls', [config.workloads.run_dir]).stdout.toString()).toBe('');
  });

  it('with --image, checks each lease in a container of that image too', async () => {
    const config = daemonConfigSchema.parse({
      ...settings,
      workloads: {
        ...settings.workloads,
        ...containerSettings,
        cgroups: false,
      },
    });
    const report = await checkGpuIsolation({ config, gpus: gpuSource(config.gpu), image: testImage });
    expect(report.ok).toBe(true);
    const containers = report.leases.filter((l) => l.mode === 'container');
    expect(containers.map((l) => l.leased)).toEqual([[0], [1], [2], [3], [], [0, 1, 2, 3]]);
    for (const lease of containers) expect(lease.devices.seen.sort()).toEqual(lease.leased.map((i) => `nvidia${i}`));
    // Without a runtime configured it cannot.
    await expect(
      checkGpuIsolation({ config: daemonConfigSchema.parse(settings), gpus: gpuSource(config.gpu), image: testImage }),
    ).rejects.toThrow(/needs workloads.container_runtime/);
    // Nor with one that does not run, said before any image is pulled, as the daemon says it.
    const missing = daemonConfigSchema.parse({
      ...settings,
      workloads: { ...settings.workloads, container_runtime: '/nonexistent/podman' },
    });
    await expect(
      checkGpuIsolation({ config: missing, gpus: gpuSource(missing.gpu), image: testImage }),
    ).rejects.toThrow('workloads.container_runtime /nonexistent/podman cannot be run');
  });

  it('fails a lease whose sandbox did not run, saying why', async () => {
    const config = daemonConfigSchema.parse({ ...settings, workloads: { ...settings.workloads, bwrap_path: 'true' } });
    // `true` answers --version and runs no sandbox: the probes see nothing and the check says so.
    const report = await checkGpuIsolation({ config, gpus: gpuSource(config.gpu) });
    expect(report.ok).toBe(false);
    expect(report.leases.filter((l) => l.ok)).toEqual([]);
    expect(report.leases[0]!.errors[0]).toMatch(/^ls \/dev: failed: sandbox_unavailable/);
  });

  it('is a command line: exit 0 and the report as JSON, 2 and JSON saying why when bubblewrap or the driver is missing', () => {
    const file = path.join(root, 'daemon.yaml');
    writeFileSync(file, JSON.stringify(settings));
    const run = (env: Record<string, string>) =>
      spawnSync('pnpm', ['-s', 'check-gpus', '--json'], {
        cwd: daemonDir,
        env: { ...process.env, DAEMON_CONFIG_FILE: file, ...env },
        encoding: 'utf8',
      });
    const ok = run({});
    expect(ok.status).toBe(0);
    const report = JSON.parse(ok.stdout) as GpuCheckReport;
    expect(report.gpus.map((g) => g.uuid)).toEqual([0, 1, 2, 3].map((i) => `GPU-simulated-${i}`));
    expect(report.ok).toBe(true);
    const missing = run({ DAEMON__WORKLOADS__BWRAP_PATH: '/nonexistent/bwrap' });
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain('cannot be run: apt-get install bubblewrap');
    expect(JSON.parse(missing.stdout)).toMatchObject({ ok: false, ran: false, error: /apt-get install bubblewrap/ });
    // A machine without a driver: JSON on standard output all the same, saying so.
    const noDriver = run({
      DAEMON__GPU__SOURCE: 'nvidia-smi',
      DAEMON__GPU__NVIDIA_SMI_PATH: '/nonexistent/nvidia-smi',
    });
    expect(noDriver.status).toBe(2);
    expect(JSON.parse(noDriver.stdout)).toMatchObject({ ok: false, ran: false, error: /nvidia-smi/ });
  });
});
