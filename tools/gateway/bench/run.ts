/**
 * `pnpm bench gateway`: what the gateway costs a small request. The storage service (on the benchmark's real S3
 * server) answers GET of a 1 KiB object; the same closed-loop load (keep-alive, 16 and 64 in flight) runs straight at
 * it and through each gateway: `pnpm start`'s (`tools/gateway`, compiled as `pnpm start` runs it) and docker-compose's
 * nginx on its own files (deploy/gateway, Debian's nginx, when installed), alternating rounds so a change in machine
 * load hits every path alike. Reports requests/s each way, their ratio to direct (target: at least 0.8) and each
 * gateway's CPU per request. Writes the `gateway` section of docs/benchmarks.md (BENCH_ONLY=1 only prints it);
 * BENCH_SECONDS and BENCH_ROUNDS shorten a trial run.
 */
import { existsSync } from 'node:fs';
import { machineLine, writeBenchSection } from '../../../scripts/lib/bench-report.ts';
import { runLoad } from '../../../services/auth/bench/load.ts';
import { cpuSeconds } from '../../../services/storage/bench/service-process.ts';
import { startService } from '../../../services/storage/test/helpers.ts';
import { type RunningGateway, startComposeNginx, startNodeGateway } from '../test/gateways.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
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
const gateways: Gateway[] = [
  { name: "pnpm start's gateway", ...(await startNodeGateway({ storage: storage.url }, { compiled: true })) },
];
// docker-compose's nginx, when nginx is installed (scripts/test-env.sh installs it).
if (existsSync('/usr/sbin/nginx')) {
  gateways.push({ name: "compose's nginx", ...(await startComposeNginx({ storage: storage.url })) });
}

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
  const paths: Path[] = targets.map((t) => ({ name: t.name, perSecond: 0, requests: 0, gatewayCpu: 0, ownCpu: 0 }));
  const rounds: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const perRound: number[] = [];
    for (const [i, t] of targets.entries()) {
      const own = process.cpuUsage();
      const cpuBefore = cpuOf(t.pids());
      const r = await load(t.url, concurrency);
      const path = paths[i]!;
      path.gatewayCpu += cpuOf(t.pids()) - cpuBefore;
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
await storage.close();
const cores = (await import('node:os')).cpus().length;
const rows = results.flatMap((r) => {
  const direct = r.paths[0]!.perSecond;
  return r.paths.map((p, i) => {
    const ratio = p.perSecond / direct;
    const gatewayUs = (p.gatewayCpu / p.requests) * 1e6;
    const ownUs = p.ownCpu / p.requests;
    const vs = i === 0 ? '1.00x' : `${ratio.toFixed(2)}x (target ≥ 0.80x: ${ratio >= 0.8 ? 'met' : 'missed'})`;
    return `| ${r.concurrency} | ${p.name} | ${Math.round(p.perSecond)} | ${vs} | ${
      i === 0 ? '–' : `${Math.round(gatewayUs)} µs`
    } | ${Math.round(ownUs)} µs | ${(((ownUs + gatewayUs) * p.perSecond) / 1e6).toFixed(2)} |`;
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

| in flight | path | requests/s | vs direct | gateway CPU per request | load generator + service CPU per request | cores busy (without the S3 server) |
| ---: | --- | ---: | ---: | ---: | ---: | ---: |
${rows.join('\n')}

The machine has ${cores} cores for the processes (load generator and service in one, the S3 server, the gateway:
one Node process, or nginx's workers); the CPU columns say what one request costs the gateway and the load generator
with the service, and the last how many cores they kept busy together. The load generator and the service share one
JavaScript thread, which bounds every path here (about one core busy either way); through a gateway each request
costs that thread a little more and waits for two more hops, which few requests in flight do not hide and more do.
`,
);
process.exit(0);
