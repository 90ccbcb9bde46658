/**
 * `pnpm bench gateway`: what the gateway costs a small request. The storage service (on the benchmark's real S3
 * server) answers GET of a 1 KiB object; the same closed-loop load (keep-alive, 16 and 64 in flight) runs straight at it and
 * through the gateway process (`tools/gateway`, compiled as `pnpm start` runs it), alternating rounds so a change in
 * machine load hits both alike. Reports requests/s each way, their ratio (target: at least 0.8) and the gateway's
 * CPU per request. Writes the `gateway` section of docs/benchmarks.md (BENCH_ONLY=1 only prints it); BENCH_SECONDS
 * and BENCH_ROUNDS shorten a trial run.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from '@gpu/common/testing';
import { machineLine, writeBenchSection } from '../../../scripts/lib/bench-report.ts';
import { compiledPath, ensureBuilt } from '../../../scripts/lib/build.ts';
import { runLoad } from '../../../services/auth/bench/load.ts';
import { cpuSeconds } from '../../../services/storage/bench/service-process.ts';
import { startService } from '../../../services/storage/test/helpers.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
/** Requests in flight: a few callers, and enough to keep every core busy. */
const CONCURRENCIES = [16, 64];
const SCRIPT = 'tools/gateway/src/server.ts';

async function startGateway(storageUrl: string): Promise<{ child: ChildProcess; url: string }> {
  await ensureBuilt([SCRIPT]);
  const port = await freePort();
  const child = spawn(process.execPath, ['--enable-source-maps', compiledPath(SCRIPT)], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', GATEWAY_STORAGE_URL: storageUrl },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  while (
    !(await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error('the gateway did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, url };
}

const storage = await startService({ listen: true });
const user = await storage.issuer.user(['renter']);
const key = `bench-${Date.now()}.bin`;
const put = await fetch(`${storage.url}/objects/${key}`, {
  method: 'PUT',
  headers: { ...user.headers, 'content-type': 'application/octet-stream' },
  body: Buffer.alloc(1024, 7),
});
if (put.status !== 201) throw new Error(`the object was not stored: ${put.status}`);
const gateway = await startGateway(storage.url);
const pid = gateway.child.pid ?? 0;

const load = (base: string, concurrency: number) =>
  runLoad({
    url: `${base}/objects/${key}`,
    headers: user.headers,
    concurrency,
    durationMs: SECONDS * 1000,
  });

interface Measured {
  concurrency: number;
  direct: number;
  through: number;
  gatewayUs: number;
  ownDirectUs: number;
  ownThroughUs: number;
  rounds: string[];
}

/** Direct and through the gateway, alternating over ROUNDS rounds, at `concurrency` requests in flight. */
async function measure(concurrency: number): Promise<Measured> {
  // Warm both paths (JIT, connections) before measuring.
  await load(storage.url, concurrency);
  await load(gateway.url, concurrency);
  let direct = 0;
  let through = 0;
  let directRequests = 0;
  let throughRequests = 0;
  let gatewayCpu = 0;
  /** CPU of this process (the load generator and the service), direct and through the gateway (µs). */
  let ownDirect = 0;
  let ownThrough = 0;
  const rounds: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const own = process.cpuUsage();
    const d = await load(storage.url, concurrency);
    const ownMid = process.cpuUsage();
    const cpuBefore = cpuSeconds(pid);
    const g = await load(gateway.url, concurrency);
    gatewayCpu += cpuSeconds(pid) - cpuBefore;
    const ownEnd = process.cpuUsage();
    ownDirect += ownMid.user + ownMid.system - own.user - own.system;
    ownThrough += ownEnd.user + ownEnd.system - ownMid.user - ownMid.system;
    if (d.ok !== d.requests || g.ok !== g.requests) throw new Error('a request failed');
    direct += d.perSecond;
    through += g.perSecond;
    directRequests += d.requests;
    throughRequests += g.requests;
    rounds.push(`${Math.round(d.perSecond)} / ${Math.round(g.perSecond)}`);
  }
  return {
    concurrency,
    direct: direct / ROUNDS,
    through: through / ROUNDS,
    gatewayUs: (gatewayCpu / throughRequests) * 1e6,
    ownDirectUs: ownDirect / directRequests,
    ownThroughUs: ownThrough / throughRequests,
    rounds,
  };
}

const results: Measured[] = [];
for (const concurrency of CONCURRENCIES) results.push(await measure(concurrency));
gateway.child.kill('SIGTERM');
await storage.close();
const cores = (await import('node:os')).cpus().length;
const rows = results.flatMap((r) => {
  const ratio = r.through / r.direct;
  return [
    `| ${r.concurrency} | direct to storage | ${Math.round(r.direct)} | 1.00x | – | ${Math.round(r.ownDirectUs)} µs | ${(
      (r.ownDirectUs * r.direct) / 1e6
    ).toFixed(2)} |`,
    `| ${r.concurrency} | through the gateway | ${Math.round(r.through)} | ${ratio.toFixed(2)}x (target ≥ 0.80x: ${
      ratio >= 0.8 ? 'met' : 'missed'
    }) | ${Math.round(r.gatewayUs)} µs | ${Math.round(r.ownThroughUs)} µs | ${(
      ((r.ownThroughUs + r.gatewayUs) * r.through) / 1e6
    ).toFixed(2)} |`,
  ];
});

writeBenchSection(
  'gateway',
  `
## Gateway

${machineLine()}

GET of a 1 KiB object from the storage service (token checked, object read from the S3 server) on keep-alive
connections, ${SECONDS} s per measurement, direct and through the gateway alternating over ${ROUNDS} rounds (direct /
gateway requests/s per round: ${results.map((r) => `${r.concurrency} in flight ${r.rounds.join(', ')}`).join('; ')}).

| in flight | path | requests/s | vs direct | gateway CPU per request | load generator + service CPU per request | cores busy (without the S3 server) |
| ---: | --- | ---: | ---: | ---: | ---: | ---: |
${rows.join('\n')}

The machine has ${cores} cores for the three processes (load generator and service in one, the S3 server, the
gateway); the CPU columns say what one request costs each of them, and the last how many cores the load generator,
the service and the gateway kept busy together. The load generator and the service share one JavaScript thread, which
bounds both paths here (about one core busy either way); through the gateway each request costs that thread a little
more and waits for two more hops, which few requests in flight do not hide and more do.
`,
);
process.exit(0);
