/**
 * Reading the machine's NVIDIA GPUs with `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`, and
 * parsing what real drivers print (fixtures in `test/fixtures/nvidia-smi`, captured on real H100 and H200 machines):
 * one line per GPU, values separated by `, `, `[N/A]` or `[Not Supported]` for what a board lacks. The parser also
 * reads the header form (`--format=csv`, units in the header and after each value), so output a provider pastes in
 * a bug report parses too.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/**
 * What the daemon asks for: fields every driver since R510 (2022) knows; a field a driver does not know makes
 * nvidia-smi refuse the whole query, so the list stays conservative.
 */
export const QUERY_FIELDS = [
  'index',
  'uuid',
  'name',
  'pci.bus_id',
  'driver_version',
  'compute_cap',
  'memory.total',
  'memory.used',
  'utilization.gpu',
  'utilization.memory',
  'temperature.gpu',
  'power.draw',
  'power.limit',
  'ecc.errors.uncorrected.volatile.total',
] as const;

/** One GPU as nvidia-smi reports it; null where the board does not report a value. */
export interface GpuReading {
  index: number;
  uuid: string;
  /** The model as the driver names it, e.g. `NVIDIA H100 80GB HBM3`. */
  name: string;
  pciBusId: string | null;
  driverVersion: string;
  computeCapability: string | null;
  /** MiB, as nvidia-smi reports memory. */
  memoryTotalMiB: number;
  memoryUsedMiB: number | null;
  utilizationGpu: number | null;
  utilizationMemory: number | null;
  /** Celsius. */
  temperature: number | null;
  /** Watts. */
  powerDraw: number | null;
  powerLimit: number | null;
  /** Uncorrected ECC errors since the driver loaded; null without ECC. */
  eccUncorrected: number | null;
}

export class NvidiaSmiError extends Error {
  override name = 'NvidiaSmiError';
}

/** Header names that differ from the query's names (`clocks.sm` is printed `clocks.current.sm`). */
const HEADER_ALIASES: Record<string, string> = {
  'clocks.current.sm': 'clocks.sm',
  'clocks.current.memory': 'clocks.mem',
  'clocks.current.graphics': 'clocks.gr',
};

const MISSING =
  /^\[?(N\/A|Not Supported|Unknown Error|Insufficient Permissions|Requested functionality has been deprecated)\]?$/i;

/** The value without a trailing unit (`81559 MiB`, `0 %`, `70.95 W`), or null for a missing one. */
function clean(value: string | undefined): string | null {
  if (value === undefined) return null;
  const v = value.trim();
  if (v === '' || MISSING.test(v)) return null;
  return v.replace(/\s*(MiB|%|W|MHz)$/, '');
}

function num(value: string | null, field: string, line: number): number | null {
  if (value === null) return null;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new NvidiaSmiError(`line ${line}: ${field} is not a number: ${JSON.stringify(value)}`);
  return n;
}

/**
 * Parses `--query-gpu` CSV output. `fields` names the columns of header-less output (the query's list); with a
 * header line (it starts with `index` or another query name), the header decides.
 */
export function parseQueryGpu(text: string, fields: readonly string[] = QUERY_FIELDS): GpuReading[] {
  let lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  let columns = [...fields];
  const first = lines[0]?.split(',').map((c) => c.trim().replace(/\s*\[[^\]]*\]$/, '')) ?? [];
  if (first.length > 0 && first.every((c) => /^[a-z_.]+$/.test(c)) && first.includes('uuid')) {
    columns = first.map((c) => HEADER_ALIASES[c] ?? c);
    lines = lines.slice(1);
  }
  return lines.map((line, i) => {
    const values = line.split(',');
    if (values.length !== columns.length) {
      throw new NvidiaSmiError(`line ${i + 1}: ${values.length} values for ${columns.length} fields: ${line}`);
    }
    const get = (field: string) => clean(values[columns.indexOf(field)]);
    const required = (field: string) => {
      const v = get(field);
      if (v === null) throw new NvidiaSmiError(`line ${i + 1}: ${field} is missing`);
      return v;
    };
    return {
      index: num(required('index'), 'index', i + 1)!,
      uuid: required('uuid'),
      name: required('name'),
      pciBusId: get('pci.bus_id'),
      driverVersion: required('driver_version'),
      computeCapability: get('compute_cap'),
      memoryTotalMiB: num(required('memory.total'), 'memory.total', i + 1)!,
      memoryUsedMiB: num(get('memory.used'), 'memory.used', i + 1),
      utilizationGpu: num(get('utilization.gpu'), 'utilization.gpu', i + 1),
      utilizationMemory: num(get('utilization.memory'), 'utilization.memory', i + 1),
      temperature: num(get('temperature.gpu'), 'temperature.gpu', i + 1),
      powerDraw: num(get('power.draw'), 'power.draw', i + 1),
      powerLimit: num(get('power.limit'), 'power.limit', i + 1),
      eccUncorrected: num(get('ecc.errors.uncorrected.volatile.total'), 'ecc.errors.uncorrected.volatile.total', i + 1),
    };
  });
}

/**
 * Runs nvidia-smi (`command`, default from PATH) and parses its readings. Past `timeoutMs` it fails whatever the
 * program does: it is sent SIGKILL and left behind (one stuck in the driver cannot be killed at all, and waiting for
 * it to exit would hold the heartbeat and the daemon's stop).
 */
export async function readNvidiaSmi(command = 'nvidia-smi', timeoutMs = 10_000): Promise<GpuReading[]> {
  let stdout: string;
  let timer: NodeJS.Timeout | undefined;
  try {
    const run = promisify(execFile)(
      command,
      [`--query-gpu=${QUERY_FIELDS.join(',')}`, '--format=csv,noheader,nounits'],
      { timeout: timeoutMs, killSignal: 'SIGKILL', encoding: 'utf8' },
    );
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        run.child.kill('SIGKILL');
        run.child.stdout?.destroy();
        run.child.stderr?.destroy();
        reject(new Error(`no answer within ${timeoutMs} ms`));
      }, timeoutMs + 1000);
    });
    run.catch(() => {});
    ({ stdout } = await Promise.race([run, late]));
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string; stdout?: string };
    if (e.code === 'ENOENT') throw new NvidiaSmiError(`${command} not found: no NVIDIA driver on this machine?`);
    throw new NvidiaSmiError(`${command} failed: ${(e.stdout || e.stderr || e.message).trim()}`);
  } finally {
    clearTimeout(timer);
  }
  return parseQueryGpu(stdout);
}
