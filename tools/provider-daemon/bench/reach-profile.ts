/**
 * Where a running Node process of the reach benchmark spends its CPU while something runs: its inspector is opened by
 * SIGUSR1 (the process was started with `--inspect-port=127.0.0.1:0`, so it listens on a port of its own, named on
 * its standard error), a CPU profile is taken over the Chrome DevTools protocol, and its samples are summed by what
 * they went to (the process's busy time; idle left out).
 */
import WebSocket from 'ws';

/** What a process's busy time went to: each part's share of it, largest first. */
export type Breakdown = { part: string; share: number }[];

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The part a function itself names (V8's own entries, socket writes), or none. */
function ownPart({ functionName: fn, url }: ProfileNode['callFrame']): string | null | undefined {
  if (fn === '(idle)') return null;
  if (fn === '(garbage collector)') return 'garbage collection';
  if (fn === '(program)') return 'V8 (unattributed)';
  if (url === '' && /^write(v|Buffer|Utf8String|Latin1String)$/.test(fn)) return 'socket writes (syscalls)';
  return undefined;
}

/** The part a caller's module makes a sample of (the nearest such caller counts). */
function moduleOf(url: string): string | undefined {
  if (url.startsWith('node:internal/crypto')) return 'crypto (AES-GCM and random bytes)';
  if (url.includes('/ssh2')) return 'ssh2 (SSH packets and channels)';
  if (/\/(ws|bufferutil)@/.test(url)) return 'ws (WebSocket frames)';
  if (/^node:(internal\/(streams|webstreams|stream_base_commons|process)|events|stream|net)/.test(url)) {
    return 'streams and events';
  }
  return undefined;
}

function breakdown(profile: Profile): Breakdown {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const partOfNode = (id: number): string | null => {
    const self = byId.get(id);
    const own = self ? ownPart(self.callFrame) : undefined;
    if (own !== undefined) return own;
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const part = moduleOf(byId.get(at)?.callFrame.url ?? '');
      if (part) return part;
    }
    return 'other';
  };
  const parts = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const part = partOfNode(id);
    if (part === null) return;
    const dt = profile.timeDeltas[i] ?? 0;
    parts.set(part, (parts.get(part) ?? 0) + dt);
    busy += dt;
  });
  return [...parts].map(([part, t]) => ({ part, share: busy > 0 ? t / busy : 0 })).sort((a, b) => b.share - a.share);
}

/** The inspector's address once the process has printed it (after SIGUSR1). */
async function inspectorUrl(pid: number, output: () => string): Promise<string> {
  const find = () => /Debugger listening on (ws:\/\/\S+)/.exec(output())?.[1];
  if (!find()) process.kill(pid, 'SIGUSR1');
  for (let i = 0; i < 100; i++) {
    const url = find();
    if (url) return url;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`process ${pid} opened no inspector`);
}

/** Profiles the process while `during` runs: what its busy time went to. */
export async function profileWhile(
  proc: { pid: number; output(): string },
  during: () => Promise<unknown>,
): Promise<Breakdown> {
  const ws = new WebSocket(await inspectorUrl(proc.pid, proc.output));
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  let next = 0;
  const call = (method: string, params: object = {}) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const id = ++next;
      const onMessage = (data: Buffer) => {
        const msg = JSON.parse(String(data)) as { id?: number; result?: Record<string, unknown>; error?: unknown };
        if (msg.id !== id) return;
        ws.off('message', onMessage);
        if (msg.error) reject(new Error(`${method}: ${JSON.stringify(msg.error)}`));
        else resolve(msg.result ?? {});
      };
      ws.on('message', onMessage);
      ws.send(JSON.stringify({ id, method, params }));
    });
  try {
    await call('Profiler.enable');
    await call('Profiler.setSamplingInterval', { interval: 250 });
    await call('Profiler.start');
    await during();
    const { profile } = (await call('Profiler.stop')) as { profile: Profile };
    await call('Profiler.disable');
    return breakdown(profile);
  } finally {
    ws.close();
  }
}

/** Two profiles at once (billing's and the daemon's) over the same run. */
export async function profileBoth(
  a: { pid: number; output(): string },
  b: { pid: number; output(): string },
  during: () => Promise<unknown>,
): Promise<[Breakdown, Breakdown]> {
  let release: () => void = () => {};
  const inner = new Promise<void>((resolve) => {
    release = resolve;
  });
  let started = 0;
  let ready: () => void = () => {};
  const bothStarted = new Promise<void>((resolve) => {
    ready = resolve;
  });
  const hold = () => {
    started += 1;
    if (started === 2) ready();
    return inner;
  };
  const profiles = Promise.all([profileWhile(a, hold), profileWhile(b, hold)]);
  // A profile that fails before it starts must not leave this waiting.
  await Promise.race([bothStarted, profiles.then(() => {})]);
  try {
    await during();
  } finally {
    release();
  }
  return profiles;
}
