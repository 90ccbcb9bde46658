/**
 * `pnpm bench reach`: what reaching a workload through the platform costs a renter, on loopback. Billing (its real
 * entry, `src/server.ts`), the provider daemon (`src/main.ts`, as root, its workload an idle one in the bubblewrap
 * sandbox) and the renter's client each run as a process of their own (bench/reach-platform.ts, bench/reach-client.ts),
 * so the CPU each uses is read apart (/proc); auth and the registry answer from this process. The same python3
 * servers (bench/reach-servers.py) run inside the workload and on the host's loopback:
 *   1. throughput of a forwarded port: `BENCH_MIB` (256) MiB streamed by the server, read through billing's
 *      port-forward route (a raw byte stream, as `gpu port-forward` opens it), straight from the host's copy, and
 *      through a bare Node relay in front of it (bench/reach-floor.ts: what relaying costs Node at all), alternated
 *      `BENCH_ROUNDS` (3) times; MB/s of each, CPU seconds per GB of billing, the daemon, the bare relay and the
 *      client, and the ratio to direct (target: at least 0.8x) end to end and split by process (what the slower of
 *      billing and the daemon would carry alone on a core: on this machine's cores the forwarded path's four
 *      processes share what the direct path's two have);
 *   2. added latency: `BENCH_ECHOES` (2000) round trips of 1 KiB over one established connection to an echo server,
 *      forwarded and direct; p50 and p99 of each and the added p50 (target: under 5 ms);
 *   3. shell echo: `BENCH_KEYS` (1000) single bytes typed into an exec stream with a terminal (`tty=true`, running
 *      `stty raw -echo; cat`), each timed until it comes back; p50 and p99 (target: p99 under 20 ms).
 * Each process's CPU is read over the timed part of each; a CPU profile of billing and the daemon over one more
 * forwarded stream (not counted; their inspectors opened by SIGUSR1, bench/reach-profile.ts) says where theirs goes.
 * Writes the `reach` section of docs/benchmarks.md (only prints it with BENCH_ONLY set).
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import type { Answer, Job, Target } from './reach-client.ts';
import { startReachPlatform } from './reach-platform.ts';
import { type Breakdown, profileBoth } from './reach-profile.ts';

const MIB = Number(process.env.BENCH_MIB ?? 256);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ECHOES = Number(process.env.BENCH_ECHOES ?? 2000);
const KEYS = Number(process.env.BENCH_KEYS ?? 1000);
const WARMUP_MIB = Math.min(MIB, 16);
/** Targets of the issue: a forwarded port at 0.8x the direct rate, under 5 ms added, a keystroke's p99 under 20 ms. */
const TARGET_RATIO = 0.8;
const TARGET_ADDED_MS = 5;
const TARGET_KEY_P99_MS = 20;
/** The workload's servers' ports (on its own loopback). */
const STREAM_PORT = 8100;
const ECHO_PORT = 8101;

const SERVERS = readFileSync(new URL('./reach-servers.py', import.meta.url), 'utf8');
const CLIENT = fileURLToPath(new URL('./reach-client.ts', import.meta.url));
const FLOOR = fileURLToPath(new URL('./reach-floor.ts', import.meta.url));

/** The machine's load when the benchmark starts: other work shares its cores. */
const LOAD_AT_START = os.loadavg()[0] ?? 0;
const platform = await startReachPlatform();
const children: ChildProcess[] = [];
process.once('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});
try {
  // Inside the workload: the servers, and which python3 runs them (the host's copy runs the same binary).
  const python = (await platform.serve(['python3', '-c', 'import sys; print(sys.executable); input()'])).firstLine;
  await platform.serve(['python3', '-c', SERVERS, 'stream', String(STREAM_PORT)]);
  await platform.serve(['python3', '-c', SERVERS, 'echo', String(ECHO_PORT)]);
  const onHost = async (mode: string): Promise<number> => {
    const child = spawn(python, ['-c', SERVERS, mode, '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    const [line] = (await new Promise((resolve) => child.stdout.once('data', (d: Buffer) => resolve([d])))) as [Buffer];
    return Number(String(line).trim());
  };
  const direct = { stream: await onHost('stream'), echo: await onHost('echo') };

  const client = fork(CLIENT, [], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  children.push(client);
  const pids = [platform.billing.pid, platform.daemon.pid];
  /** Runs a job in the client: its answer. */
  const run = async (job: Job): Promise<Answer> => {
    const answer = await new Promise<Answer>((resolve, reject) => {
      const exited = (code: number | null) => reject(new Error(`the client exited (${code}) during ${job.op}`));
      client.once('exit', exited);
      client.once('message', (a: Answer) => {
        client.off('exit', exited);
        resolve(a);
      });
      client.send(job);
    });
    if (answer.error) throw new Error(`${job.op}: ${answer.error}`);
    return answer;
  };
  const wsBase = platform.billingUrl.replace(/^http/, 'ws');
  const forwarded = (port: number): Target => ({
    kind: 'raw',
    url: `${platform.billingUrl}/api/v1/billing/sessions/${platform.sessionId}/port-forward?port=${port}`,
    headers: platform.headers,
  });

  // A bare relay in front of the host's server (bench/reach-floor.ts): what passing a stream costs Node at all.
  const floor = spawn(process.execPath, ['--import', 'tsx', FLOOR, String(direct.stream)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(floor);
  const floorPort = Number(
    String(await new Promise<Buffer>((resolve) => floor.stdout!.once('data', (d: Buffer) => resolve(d)))).trim(),
  );

  // 1. Throughput, alternated so that a change in the machine's load hits each alike. The bare relay's CPU is read
  // in billing's place (its stream does not pass billing).
  const paths = {
    forwarded: forwarded(STREAM_PORT),
    direct: { kind: 'tcp', port: direct.stream } as Target,
    floor: { kind: 'tcp', port: floorPort } as Target,
  };
  const pidsOf = (name: keyof typeof paths) => (name === 'floor' ? [floor.pid!, platform.daemon.pid] : pids);
  for (const [name, target] of Object.entries(paths)) {
    await run({ op: 'stream', target, bytes: WARMUP_MIB * 2 ** 20, pids: pidsOf(name as keyof typeof paths) });
  }
  const streams = { forwarded: [] as Measured[], direct: [] as Measured[], floor: [] as Measured[] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = ['forwarded', 'direct', 'floor'] as const;
    for (const name of round % 2 === 0 ? order : [...order].reverse()) {
      const a = await run({ op: 'stream', target: paths[name], bytes: MIB * 2 ** 20, pids: pidsOf(name) });
      streams[name].push(measured(a));
      console.log(`${name}: ${rate(MIB * 2 ** 20, a.ms[0]!).toFixed(0)} MB/s`);
    }
  }

  // Where billing's and the daemon's time goes: one more forwarded stream under their profilers, not counted.
  const parts = await profileBoth(platform.billing, platform.daemon, () =>
    run({ op: 'stream', target: paths.forwarded, bytes: MIB * 2 ** 20, pids }),
  ).then(
    ([billing, daemon]) => ({ billing, daemon }),
    (err: Error) => {
      console.error(`no profile: ${err.message}`);
      return null;
    },
  );

  // 2. 1 KiB round trips over one connection each, in two halves alternated.
  const echoes = { forwarded: [] as Measured[], direct: [] as Measured[] };
  const echoTargets = { forwarded: forwarded(ECHO_PORT), direct: { kind: 'tcp', port: direct.echo } as Target };
  for (let half = 0; half < 2; half++) {
    for (const name of half === 0 ? (['forwarded', 'direct'] as const) : (['direct', 'forwarded'] as const)) {
      const a = await run({
        op: 'echo',
        target: echoTargets[name],
        size: 1024,
        count: Math.ceil(ECHOES / 2),
        warmup: 100,
        pids,
      });
      echoes[name].push(measured(a));
    }
  }

  // 3. Keystrokes into a terminal.
  const q = new URLSearchParams({ tty: 'true' });
  for (const a of ['sh', '-c', 'stty raw -echo && printf READY && exec cat']) q.append('command', a);
  const keys = measured(
    await run({
      op: 'keys',
      url: `${wsBase}/api/v1/billing/sessions/${platform.sessionId}/exec?${q}`,
      headers: platform.headers,
      count: KEYS,
      warmup: 50,
      pids,
    }),
  );
  client.disconnect();
  await platform.close();
  report(streams, echoes, keys, parts);
} catch (err) {
  await platform.close();
  throw err;
}
process.exit(0);

/** One job's timings and the CPU milliseconds each process used in it. */
interface Measured {
  ms: number[];
  billing: number;
  daemon: number;
  client: number;
  /** The whole machine's, every core and process. */
  machine: number;
}

function measured(a: Answer): Measured {
  return { ms: a.ms, billing: a.cpu.pids[0]!, daemon: a.cpu.pids[1]!, client: a.cpu.client, machine: a.cpu.machine };
}

/** MB/s (10^6 bytes a second) of `bytes` in `ms`. */
function rate(bytes: number, ms: number): number {
  return bytes / 1e6 / (ms / 1000);
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

/** A paragraph broken into lines of at most `width` characters, as the rest of docs/benchmarks.md is. */
function wrap(text: string, width = 120): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line ? `${line} ${word}` : word;
    }
  }
  return [...lines, line].join('\n');
}

function sum(xs: Measured[], k: 'billing' | 'daemon' | 'client' | 'machine'): number {
  return xs.reduce((t, m) => t + m[k], 0);
}

function report(
  streams: Record<'forwarded' | 'direct' | 'floor', Measured[]>,
  echoes: Record<'forwarded' | 'direct', Measured[]>,
  keys: Measured,
  parts: Record<'billing' | 'daemon', Breakdown> | null,
): void {
  const bytes = MIB * 2 ** 20;
  const mbps = (xs: Measured[]) =>
    quantile(
      xs.map((m) => rate(bytes, m.ms[0]!)),
      0.5,
    );
  const fwdRate = mbps(streams.forwarded);
  const directRate = mbps(streams.direct);
  const ratio = fwdRate / directRate;
  const trips = (xs: Measured[]) => xs.flatMap((m) => m.ms);
  const fwdEcho = trips(echoes.forwarded);
  const directEcho = trips(echoes.direct);
  const added = quantile(fwdEcho, 0.5) - quantile(directEcho, 0.5);
  const keyP50 = quantile(keys.ms, 0.5);
  const keyP99 = quantile(keys.ms, 0.99);
  const ok = (met: boolean) => (met ? 'yes' : '**no**');
  const ms = (x: number) => (x < 10 ? x.toFixed(2) : x.toFixed(1));

  // CPU: seconds per GB (10^9 bytes) streamed; cores busy while streaming (CPU time over wall time); the rest of the
  // machine is every other process (the python servers, PostgreSQL, auth and the registry here, anyone else's).
  type Who = 'billing' | 'daemon' | 'client' | 'rest';
  const cpuOf = (xs: Measured[], k: Who) =>
    k === 'rest' ? sum(xs, 'machine') - sum(xs, 'billing') - sum(xs, 'daemon') - sum(xs, 'client') : sum(xs, k);
  const gb = (xs: Measured[]) => (bytes * xs.length) / 1e9;
  const wall = (xs: Measured[]) => xs.reduce((t, m) => t + m.ms[0]!, 0);
  const count = (xs: Measured[]) => xs.reduce((t, m) => t + m.ms.length, 0);
  const perGb = (xs: Measured[], k: Who) => cpuOf(xs, k) / 1000 / gb(xs);
  const busy = (xs: Measured[], k: Who | 'machine') => (k === 'machine' ? sum(xs, k) : cpuOf(xs, k)) / wall(xs);
  const perTrip = (xs: Measured[], k: Who) => Math.round((cpuOf(xs, k) * 1000) / count(xs));
  const cpuRow = (what: string, xs: Measured[], f: (xs: Measured[], k: Who) => string) =>
    `| ${what} | ${(['billing', 'daemon', 'client', 'rest'] as const).map((k) => f(xs, k)).join(' | ')} |`;
  const fwd = streams.forwarded;
  const cores = navigator.hardwareConcurrency;
  // What the three processes of the forwarded path need per GB together, and so the most that path could carry on
  // this machine's cores with nothing else running.
  const pathPerGb = perGb(fwd, 'billing') + perGb(fwd, 'daemon') + perGb(fwd, 'client');
  const ceiling = (cores * 1000) / pathPerGb;
  /** MB/s a process would carry alone on a core, at its CPU per GB. */
  const alone = (xs: Measured[], k: Who) => (1000 / perGb(xs, k)).toFixed(0);
  const share = (b: Breakdown) =>
    b
      .slice(0, 5)
      .map((p) => `${p.part} ${Math.round(p.share * 100)} %`)
      .join(', ');

  const floorRate = mbps(streams.floor);
  const floorPerGb = perGb(streams.floor, 'billing');
  const floorBound = 1000 / floorPerGb;
  // The platform's two hops split by process: what the slower of billing and the daemon would carry alone on a core.
  const relayPerGb = Math.max(perGb(fwd, 'billing'), perGb(fwd, 'daemon'));
  const relayBound = 1000 / relayPerGb;
  const relayRatio = relayBound / directRate;
  const throughputNote =
    (ratio >= TARGET_RATIO
      ? `End to end on this machine the forwarded port keeps ${ratio.toFixed(2)}x the direct rate.`
      : `End to end on this machine the forwarded port keeps ${ratio.toFixed(2)}x the direct rate: its path is ` +
        `four processes (the server, the daemon, billing and the client) sharing ${cores} cores, where the direct ` +
        'one is two.') +
    " The bytes take no SSH and no WebSocket frame on the way: the renter's stream and the daemon's dial-back are " +
    "raw byte streams (`Upgrade: tcp`) that billing joins, and the daemon joins the dial-back to the workload's " +
    'socket; each reads both sockets into buffers of its own, reused for every read, and writes each read straight ' +
    'to the other socket (`packages/common/src/http/byte-relay.ts`: a socket the server accepted is taken over by ' +
    "one made with Node's `onread`). What is left is moving the bytes: billing " +
    `${perGb(fwd, 'billing').toFixed(2)} and the daemon ${perGb(fwd, 'daemon').toFixed(2)} CPU s per GB, the ` +
    `client ${perGb(fwd, 'client').toFixed(2)} (${perGb(streams.direct, 'client').toFixed(2)} direct); ` +
    `${pathPerGb.toFixed(1)} s per GB in all, so on this machine's ${cores} cores the forwarded path could carry at ` +
    `most about ${ceiling.toFixed(0)} MB/s with nothing else running (while it streamed the machine was busy ` +
    `${busy(fwd, 'machine').toFixed(2)} of ${cores} cores, ${busy(fwd, 'rest').toFixed(2)} of them outside the three ` +
    'processes). Split by process (in production billing and the daemon each run on a machine of their own, and ' +
    `the renter's program on theirs): alone on a core, billing would carry about ${alone(fwd, 'billing')} MB/s and ` +
    `the daemon ${alone(fwd, 'daemon')}, so the platform's hops are bound at about ${relayBound.toFixed(0)} MB/s, ` +
    `${relayRatio.toFixed(2)}x the direct rate (the target ${relayRatio >= TARGET_RATIO ? 'met' : '**missed**'}); ` +
    `the client, the renter's own program, would read about ${alone(fwd, 'client')} MB/s. The floor under any relay ` +
    'in Node: a bare one (bench/reach-floor.ts, one small ' +
    'process passing the stream with the same `relayBytes` and nothing else) spent ' +
    `${floorPerGb.toFixed(2)} CPU s per GB and carried ${floorRate.toFixed(0)} MB/s; alone on a core it would ` +
    `carry about ${floorBound.toFixed(0)} MB/s, ${(floorBound / directRate).toFixed(2)}x the direct rate. The ` +
    "steps so far, billing and the daemon in CPU s per GB: SSH channels (ssh2's JavaScript AES-GCM inside a " +
    'WebSocket) 14.3 and 13.9 (2026-11-26); WebSocket messages joined by billing 4.1 and 3.3; raw byte streams read ' +
    "as streams ('data', a new buffer of at most 64 KiB for every read) 2.3 and 2.2 with V8's default collector, " +
    'which ran a full mark-compact of the heap each time the read buffers outside it grew by its limit, and 1.59 ' +
    'and 1.85 with those buffers counted in its global limit (`tuneGcForStreams`, 2026-11-27); read into reused ' +
    'buffers, the figures above.' +
    (parts
      ? ` A profile of one more forwarded stream (not counted) puts billing's busy time in ` +
        `${share(parts.billing)}; the daemon's in ${share(parts.daemon)}.`
      : '');
  const latencyNote =
    `A 1 KiB round trip on an established forwarded connection adds ${ms(added)} ms at the median ` +
    `(${added < TARGET_ADDED_MS ? 'within' : '**over**'} the ${TARGET_ADDED_MS} ms target): two hops, ` +
    "billing joining the renter's stream to the daemon's dial-back, and the daemon's join to the workload's " +
    `socket, an event-loop turn each way in each of billing and the daemon (about ${perTrip(echoes.forwarded, 'billing')} and ` +
    `${perTrip(echoes.forwarded, 'daemon')} µs of CPU per round trip). A keystroke takes the exec path ` +
    "(WebSocket, billing's channel bridge, SSH, the daemon's PTY, `cat` and back): " +
    `p99 ${ms(keyP99)} ms, ${keyP99 < TARGET_KEY_P99_MS ? 'within' : '**over**'} the ${TARGET_KEY_P99_MS} ms target.` +
    (busy(fwd, 'rest') > 0.3
      ? ' The tails (p99) move with what else runs on the machine: a process waiting for a core waits whole ' +
        'scheduler slices.'
      : '');

  writeBenchSection(
    'reach',
    `## Reach (forwarded ports, shell)

${machineLine()} · load average at start ${LOAD_AT_START.toFixed(1)}

A renter reaching a running workload through the platform, everything on loopback: billing (its real entry,
\`src/server.ts\`, on the test PostgreSQL, \`reach.max_mib_per_second\` 0 so that the relay's own cost is measured),
the provider daemon (\`src/main.ts\` as root, its workload idle in the bubblewrap sandbox, its SSH link to billing's
relay over a WebSocket) and the renter's client, each a process of its own; the same python3 servers inside the
workload and on the host. Forwarded: client → port-forward raw byte stream (\`Upgrade: tcp\`, as \`gpu port-forward\`
opens it) → billing → the daemon's dial-back raw stream (asked for over the SSH link, \`gpu-dial\`) → daemon → the
workload's loopback. Direct: client → TCP → the host's copy of the server. Bare relay: client → one small Node process
passing the stream (bench/reach-floor.ts) → the host's copy.

| measure | through the relay | direct | target | met |
|---|---|---|---|---|
| throughput end to end, ${MIB} MiB streamed (median of ${ROUNDS}) | ${fwdRate.toFixed(0)} MB/s | ${directRate.toFixed(0)} MB/s | ≥ ${TARGET_RATIO}x direct: ${ratio.toFixed(2)}x | ${ok(ratio >= TARGET_RATIO)} |
| throughput, split by process: the slower of billing and the daemon alone on a core | ${relayBound.toFixed(0)} MB/s | ${directRate.toFixed(0)} MB/s | ≥ ${TARGET_RATIO}x direct: ${relayRatio.toFixed(2)}x | ${ok(relayRatio >= TARGET_RATIO)} |
| throughput through a bare Node relay | ${floorRate.toFixed(0)} MB/s | | ${(floorRate / directRate).toFixed(2)}x direct | |
| 1 KiB request and answer, p50 (${fwdEcho.length} each) | ${ms(quantile(fwdEcho, 0.5))} ms | ${ms(quantile(directEcho, 0.5))} ms | added < ${TARGET_ADDED_MS} ms: ${ms(added)} ms | ${ok(added < TARGET_ADDED_MS)} |
| 1 KiB request and answer, p99 | ${ms(quantile(fwdEcho, 0.99))} ms | ${ms(quantile(directEcho, 0.99))} ms | | |
| shell echo, 1 byte typed, p50 (${keys.ms.length}) | ${ms(keyP50)} ms | | | |
| shell echo, p99 | ${ms(keyP99)} ms | | < ${TARGET_KEY_P99_MS} ms | ${ok(keyP99 < TARGET_KEY_P99_MS)} |

CPU of each process (user + system: /proc for billing and the daemon, \`process.cpuUsage()\` for the client; the rest
of the machine is every other process: the python servers, PostgreSQL, auth and the registry, anything else running):

| | billing | daemon | client | rest of the machine |
|---|---|---|---|---|
${cpuRow('forwarded stream: CPU s per GB', fwd, (xs, k) => perGb(xs, k).toFixed(2))}
${cpuRow('direct stream: CPU s per GB', streams.direct, (xs, k) => perGb(xs, k).toFixed(2))}
| bare relay's stream: CPU s per GB | ${floorPerGb.toFixed(2)} (the bare relay) | | ${perGb(streams.floor, 'client').toFixed(2)} | ${perGb(streams.floor, 'rest').toFixed(2)} |
${cpuRow('forwarded stream: cores busy', fwd, (xs, k) => busy(xs, k).toFixed(2))}
${cpuRow('forwarded 1 KiB round trip: CPU µs each', echoes.forwarded, (xs, k) => String(perTrip(xs, k)))}
${cpuRow('direct 1 KiB round trip: CPU µs each', echoes.direct, (xs, k) => String(perTrip(xs, k)))}
${cpuRow('keystroke: CPU µs each', [keys], (xs, k) => String(perTrip(xs, k)))}

${wrap(throughputNote)}

${wrap(latencyNote)}`,
  );
}
