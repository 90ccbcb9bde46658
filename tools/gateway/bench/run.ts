/**
 * `pnpm bench gateway`: what the gateway costs a small request. The storage service (on the benchmark's real S3
 * server) answers GET of a 1 KiB object; the same closed-loop load (keep-alive, 16 and 64 in flight) runs straight at
 * it and through each gateway, alternating rounds so a change in machine load hits every path alike: `pnpm start`'s two
 * (nginx on deploy/gateway's files where nginx is installed, the Node one, `tools/gateway`, compiled, otherwise), each
 * reaching the service at its gateway socket as under `pnpm start`, and docker-compose's nginx (deploy/gateway, over
 * TCP; Debian's nginx, when installed). Reports requests/s each way, their ratio to direct (target: at least 0.9) and
 * each gateway's CPU per request. Writes the `gateway` section of docs/benchmarks.md (BENCH_ONLY=1 only prints it);
 * BENCH_SECONDS and BENCH_ROUNDS shorten a trial run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cpuSince, cpuSnapshot, machineLine, writeBenchSection } from '@gpu/bench-kit';
import { listenForGateway } from '@gpu/common';
import { runLoad } from '../../../services/auth/bench/load.ts';
import { cpuSeconds } from '../../../services/storage/bench/service-process.ts';
import { startService } from '../../../services/storage/test/helpers.ts';
import { findNginx } from '../src/nginx.ts';
import {
  type RunningGateway,
  startComposeNginx,
  startNodeGateway,
  startPlatformNginxGateway,
} from '../test/gateways.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
/** The least share of the direct rate a gateway is to keep (issue #41: 0.9x at both numbers in flight). */
const TARGET = 0.9;
/** Requests in flight: a few callers, and enough to keep every core busy. */
const CONCURRENCIES = [16, 64];

interface Gateway extends RunningGateway {
  name: string;
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
// As under pnpm start: the service also answers on its gateway socket, in a folder of this user's alone.
const socketDir = mkdtempSync(path.join(tmpdir(), 'bench-gateway-'));
const socket = await listenForGateway(storage.app, path.join(socketDir, 'storage.sock'));
const gateways: Gateway[] = [];
// pnpm start's gateway where nginx is installed (scripts/test-env.sh installs it), and docker-compose's nginx.
const nginxInstalled = findNginx() !== undefined;
if (nginxInstalled) {
  gateways.push({ name: "pnpm start's nginx", ...(await startPlatformNginxGateway({}, { socketDir })) });
}
gateways.push({
  name: "pnpm start's Node gateway",
  ...(await startNodeGateway({}, { compiled: true, socketDir })),
});
if (nginxInstalled) gateways.push({ name: "compose's nginx", ...(await startComposeNginx({ storage: storage.url })) });

const load = (base: string, concurrency: number) =>
  runLoad({
    url: `${base}/objects/${key}`,
    headers: user.headers,
    concurrency,
    durationMs: SECONDS * 1000,
  });

interface Path {
  name: string;
  perSecond: number;
  requests: number;
  /** The gateway's own CPU (s); 0 direct. */
  gatewayCpu: number;
  /** This process's CPU, the load generator's and the service's (µs). */
  ownCpu: number;
  /** The whole machine's CPU (ms): every process, the S3 server's and PostgreSQL's included. */
  machineMs: number;
}

interface Measured {
  concurrency: number;
  paths: Path[];
  rounds: string[];
}

const cpuOf = (pids: number[]) => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);

/** Direct and through each gateway, alternating over ROUNDS rounds, at `concurrency` requests in flight. */
async function measure(concurrency: number): Promise<Measured> {
  const targets = [
    { name: 'direct to storage', url: storage.url, pids: () => [] as number[] },
    ...gateways.map((g) => ({ name: `through ${g.name}`, url: g.base, pids: g.pids })),
  ];
  // Warm every path (JIT, connections) before measuring.
  for (const t of targets) await load(t.url, concurrency);
  const paths: Path[] = targets.map((t) => ({
    name: t.name,
    perSecond: 0,
    requests: 0,
    gatewayCpu: 0,
    ownCpu: 0,
    machineMs: 0,
  }));
  const rounds: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const perRound: number[] = [];
    for (const [i, t] of targets.entries()) {
      const own = process.cpuUsage();
      const cpuBefore = cpuOf(t.pids());
      const machineBefore = cpuSnapshot(undefined);
      const r = await load(t.url, concurrency);
      const path = paths[i]!;
      path.gatewayCpu += cpuOf(t.pids()) - cpuBefore;
      path.machineMs += cpuSince(machineBefore, cpuSnapshot(undefined)).machine ?? Number.NaN;
      const ownEnd = process.cpuUsage(own);
      path.ownCpu += ownEnd.user + ownEnd.system;
      if (r.ok !== r.requests) throw new Error(`a request failed ${t.name}`);
      path.perSecond += r.perSecond / ROUNDS;
      path.requests += r.requests;
      perRound.push(Math.round(r.perSecond));
    }
    rounds.push(perRound.join(' / '));
  }
  return { concurrency, paths, rounds };
}

const results: Measured[] = [];
for (const concurrency of CONCURRENCIES) results.push(await measure(concurrency));
for (const g of gateways) await g.stop();
socket.close();
await storage.close();
rmSync(socketDir, { recursive: true, force: true });
const cores = (await import('node:os')).cpus().length;
const rows = results.flatMap((r) => {
  const direct = r.paths[0]!.perSecond;
  const directMachineUs = (r.paths[0]!.machineMs / r.paths[0]!.requests) * 1000;
  return r.paths.map((p, i) => {
    const ratio = p.perSecond / direct;
    const gatewayUs = (p.gatewayCpu / p.requests) * 1e6;
    const ownUs = p.ownCpu / p.requests;
    const vs = i === 0 ? '1.00x' : `${ratio.toFixed(2)}x (target ≥ 0.90x: ${ratio >= TARGET ? 'met' : 'missed'})`;
    const machineUs = (p.machineMs / p.requests) * 1000;
    const machineBusy = p.machineMs / 1000 / (ROUNDS * SECONDS);
    // Requests per second of the machine's CPU, against direct: what the path costs, whatever the machine had free.
    const perCpu = i === 0 ? '1.00x' : `${((directMachineUs / machineUs) as number).toFixed(2)}x`;
    return `| ${r.concurrency} | ${p.name} | ${Math.round(p.perSecond)} | ${vs} | ${
      i === 0 ? '–' : `${Math.round(gatewayUs)} µs`
    } | ${Math.round(ownUs)} µs | ${(((ownUs + gatewayUs) * p.perSecond) / 1e6).toFixed(2)} | ${Math.round(
      machineUs,
    )} µs | ${machineBusy.toFixed(2)} | ${perCpu} |`;
  });
});

writeBenchSection(
  'gateway',
  `
## Gateway

${machineLine()}

GET of a 1 KiB object from the storage service (token checked, object read from the S3 server) on keep-alive
connections, ${SECONDS} s per measurement, direct and through each gateway alternating over ${ROUNDS} rounds
(${results[0]!.paths.map((p) => p.name).join(' / ')} requests/s per round: ${results
    .map((r) => `${r.concurrency} in flight ${r.rounds.join(', ')}`)
    .join('; ')}).

| in flight | path | requests/s | vs direct | gateway CPU per request | load generator + service CPU per request | cores busy (without the S3 server) | machine CPU per request | machine cores busy | requests per machine CPU-second vs direct |
| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
${rows.join('\n')}

\`pnpm start\` runs nginx on deploy/gateway's files where nginx is installed, its Node gateway otherwise; both reach the
service at its gateway socket, as under \`pnpm start\`. The machine has ${cores} cores for the processes (load generator
and service in one, the S3 server, the gateway: one Node process, or nginx's workers); the CPU columns say what one request costs the gateway and the load generator
with the service, and how many cores they kept busy together; then the whole machine's (every process: the S3 server,
PostgreSQL, the gateway) per request and in cores, and how many requests a second of the machine's CPU serves on
the path against direct: where the machine's cores are all busy, the rate is what its CPU buys, and that last ratio
is the share of it a gateway leaves. The load generator and the service share one
JavaScript thread, which bounds every path here (about one core busy either way); through a gateway each request
costs that thread a little more and waits for two more hops, which few requests in flight do not hide and more do.
`,
);
process.exit(0);
