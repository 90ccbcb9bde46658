/** The GPU reader against what real drivers print (fixtures captured on real H100 and H200 machines). */
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { NvidiaSmiError, parseQueryGpu, QUERY_FIELDS, readNvidiaSmi } from '../src/gpu/nvidia-smi.ts';
import { gpuMetrics, gpuSpec } from '../src/gpu/registry-gpu.ts';

const fixture = (machine: string, file: string) =>
  readFileSync(new URL(`./fixtures/nvidia-smi/${machine}/${file}`, import.meta.url), 'utf8');
const fieldsOf = (machine: string) => fixture(machine, 'fields.txt').trim().split(',');

describe('nvidia-smi --query-gpu output', () => {
  it('reads an H100 as its driver prints it, header-less and unit-less', () => {
    const [gpu] = parseQueryGpu(
      fixture('h100-80gb-hbm3', 'query-gpu-noheader-nounits.csv'),
      fieldsOf('h100-80gb-hbm3'),
    );
    expect(gpu).toEqual({
      index: 0,
      uuid: 'GPU-ea30f9d5-8c06-15b6-3ca8-fe0ea8ee6f7c',
      name: 'NVIDIA H100 80GB HBM3',
      pciBusId: '00000000:00:06.0',
      driverVersion: '580.159.04',
      computeCapability: '9.0',
      memoryTotalMiB: 81559,
      memoryUsedMiB: 0,
      utilizationGpu: 0,
      utilizationMemory: 0,
      temperature: 32,
      powerDraw: 70.96,
      powerLimit: 700,
      eccUncorrected: 0,
    });
  });

  it.each(['h100-80gb-hbm3', 'h200'])('reads the header form with units the same as the bare form (%s)', (machine) => {
    const bare = parseQueryGpu(fixture(machine, 'query-gpu-noheader-nounits.csv'), fieldsOf(machine));
    const withHeader = parseQueryGpu(fixture(machine, 'query-gpu.csv'));
    // power.draw was sampled twice, a few ms apart: everything else is the same reading.
    expect(withHeader.map((g) => ({ ...g, powerDraw: 0 }))).toEqual(bare.map((g) => ({ ...g, powerDraw: 0 })));
    expect(Math.abs(withHeader[0]!.powerDraw! - bare[0]!.powerDraw!)).toBeLessThan(5);
  });

  it('reads an H200 with its 141 GB as the driver counts it', () => {
    const [gpu] = parseQueryGpu(fixture('h200', 'query-gpu.csv'));
    expect(gpu).toMatchObject({ name: 'NVIDIA H200', memoryTotalMiB: 143771, computeCapability: '9.0' });
  });

  it('turns [N/A] and [Not Supported] into null, and refuses a line with a missing required value', () => {
    const fields = ['index', 'uuid', 'name', 'driver_version', 'memory.total', 'power.draw', 'temperature.gpu'];
    const [gpu] = parseQueryGpu('0, GPU-1, NVIDIA GeForce RTX 4090, 550.54, 24564, [N/A], [Not Supported]\n', fields);
    expect(gpu).toMatchObject({
      name: 'NVIDIA GeForce RTX 4090',
      memoryTotalMiB: 24564,
      powerDraw: null,
      temperature: null,
    });
    expect(() => parseQueryGpu('0, GPU-1, [N/A], 550.54, 24564, 1, 2\n', fields)).toThrow(/name is missing/);
    expect(() => parseQueryGpu('0, GPU-1, x\n', fields)).toThrow(NvidiaSmiError);
  });

  it('maps a reading to the registry: the spec for registration, metrics for heartbeats', () => {
    const [gpu] = parseQueryGpu(fixture('h100-80gb-hbm3', 'query-gpu.csv'));
    expect(gpuSpec(gpu!)).toEqual({
      model_name: 'NVIDIA H100 80GB HBM3',
      vram: 81559,
      driver_version: '580.159.04',
      compute_capability: '9.0',
      power_consumption: 700,
    });
    expect(gpuMetrics(gpu!, 0)).toEqual({
      index: 0,
      utilization_gpu: 0,
      utilization_mem: 0,
      temperature: 32,
      power_draw: 71,
      is_healthy: true,
    });
    expect(gpuMetrics({ ...gpu!, eccUncorrected: 3 }, 0).is_healthy).toBe(false);
    // What a board does not report is left out, not sent as null.
    expect(gpuMetrics({ ...gpu!, temperature: null, powerDraw: null }, 1)).toEqual({
      index: 1,
      utilization_gpu: 0,
      utilization_mem: 0,
      is_healthy: true,
    });
  });
});

describe('running nvidia-smi', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nvidia-smi-'));
  /** An executable that prints `stdout` and exits with `code` (standing in for the driver's binary). */
  const executable = (name: string, stdout: string, code = 0) => {
    const file = join(dir, name);
    writeFileSync(file, `#!/bin/sh\ncat <<'OUT'\n${stdout}OUT\nexit ${code}\n`);
    chmodSync(file, 0o755);
    return file;
  };

  it('asks for the daemon’s fields without header or units, and parses the answer', async () => {
    const line =
      '0, GPU-a, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 550.54.15, 8.0, 81920, 10, 55, 20, 41, 250.5, 400.00, 0\n';
    const argsFile = join(dir, 'args');
    const file = join(dir, 'fake-smi');
    writeFileSync(file, `#!/bin/sh\necho "$@" > ${argsFile}\nprintf '%s' '${line}'\n`);
    chmodSync(file, 0o755);
    const [gpu] = await readNvidiaSmi(file);
    expect(readFileSync(argsFile, 'utf8').trim()).toBe(
      `--query-gpu=${QUERY_FIELDS.join(',')} --format=csv,noheader,nounits`,
    );
    expect(gpu).toMatchObject({ name: 'NVIDIA A100-SXM4-80GB', utilizationGpu: 55, powerDraw: 250.5 });
  });

  it('says what went wrong when the driver is missing or fails', async () => {
    await expect(readNvidiaSmi(join(dir, 'no-such-binary'))).rejects.toThrow(/not found/);
    const failing = executable(
      'failing-smi',
      "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
      9,
    );
    await expect(readNvidiaSmi(failing)).rejects.toThrow(/couldn't communicate with the NVIDIA driver/);
  });

  it('fails at its timeout even when the program ignores SIGTERM and leaves a process holding its output', async () => {
    // As one stuck in the driver: no answer, and its output never closes (a child of its own holds it).
    const file = join(dir, 'stuck-smi');
    writeFileSync(file, "#!/bin/sh\ntrap '' TERM\nsleep 30 &\nwait\n");
    chmodSync(file, 0o755);
    const started = Date.now();
    await expect(readNvidiaSmi(file, 500)).rejects.toThrow(NvidiaSmiError);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
