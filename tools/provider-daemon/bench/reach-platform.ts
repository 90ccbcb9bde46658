/**
 * The platform of the reach benchmark (bench/reach.ts): bench/platform.ts's (auth and the registry in this process,
 * billing and the provider daemon each a process of its own, the daemon as root with its workloads in the real
 * bubblewrap sandbox, dialling billing's relay). A renter with a funded wallet rents one GPU for an idle workload;
 * `exec` runs programs in it.
 */
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { type NodeProcess, post, startPlatform, until } from './platform.ts';

export interface ReachPlatform {
  billingUrl: string;
  billing: NodeProcess;
  daemon: NodeProcess;
  /** The renter's `authorization` header. */
  headers: Record<string, string>;
  /** The renter's session, its idle workload running. */
  sessionId: string;
  /** Starts `argv` in the workload (an exec stream left open while it runs): what it printed first. */
  serve(argv: string[]): Promise<{ firstLine: string; stop(): void }>;
  close(): Promise<void>;
}

export async function startReachPlatform(): Promise<ReachPlatform> {
  // A session's byte limit off (`reach.max_mib_per_second`, 128 MiB/s by default): the relay's own cost is measured.
  const p = await startPlatform('reach_bench', { billing: { reach: { max_mib_per_second: 0 } } });
  try {
    const { billingUrl } = p;
    const { userId, headers, walletId } = await p.renter();
    const { daemon, providerId } = await p.machine();
    // One GPU for an idle workload, running once the daemon's runner started it.
    const started = await post(
      `${billingUrl}/api/v1/billing/start-session`,
      {
        user_id: userId,
        wallet_id: walletId,
        provider_id: providerId,
        job_id: randomUUID(),
        gpu_model: 'H100',
        gpu_count: 1,
        requested_vram_mb: 0,
        estimated_power_w: 0,
        accepted_hourly_rate: '100',
        workload: { idle: true, max_runtime_seconds: 24 * 3600 },
      },
      headers,
    );
    const sessionId = (started.session as { id: string }).id;
    p.onClose(async () => {
      await post(`${billingUrl}/api/v1/billing/end-session`, { session_id: sessionId }, headers);
    });
    await until(
      () => `the workload did not start:\n${daemon.output()}`,
      async () => {
        const res = await fetch(`${billingUrl}/api/v1/billing/sessions/${sessionId}/workload`, { headers });
        const w = (await res.json()) as { state?: string };
        if (w.state && ['exited', 'failed', 'stopped'].includes(w.state)) throw new Error(`workload ${w.state}`);
        return w.state === 'running' ? true : undefined;
      },
    );

    const platform: ReachPlatform = {
      billingUrl,
      billing: p.billing,
      daemon,
      headers,
      sessionId,
      async serve(argv) {
        // The daemon's connection to the relay may still be on its way: retried while billing says so.
        const opened = await until(
          () => `${argv[0]} did not start in the workload:\n${daemon.output()}`,
          () => execStream(billingUrl, headers, sessionId, argv),
        );
        p.onClose(async () => opened.stop());
        return opened;
      },
      close: () => p.close(),
    };
    return platform;
  } catch (err) {
    await p.close();
    throw err;
  }
}

/** Starts a program in the workload and resolves with its first line of output (undefined: refused, try again). */
function execStream(
  billingUrl: string,
  headers: Record<string, string>,
  sessionId: string,
  argv: string[],
): Promise<{ firstLine: string; stop(): void } | undefined> {
  const q = new URLSearchParams();
  for (const a of argv) q.append('command', a);
  const ws = new WebSocket(
    `${billingUrl.replace(/^http/, 'ws')}/api/v1/billing/sessions/${sessionId}/exec?${q}`,
    ['v5.channel.k8s.io'],
    { headers },
  );
  return new Promise((resolve, reject) => {
    let out = '';
    ws.on('message', (d: Buffer) => {
      if (d[0] === 1) out += String(d.subarray(1));
      if (d[0] === 2) process.stderr.write(d.subarray(1));
      if (out.includes('\n')) resolve({ firstLine: out.slice(0, out.indexOf('\n')), stop: () => ws.close() });
    });
    ws.once('unexpected-response', (_req, res) => {
      res.resume();
      // 409 DAEMON_NOT_CONNECTED while the daemon dials; anything else is a failure.
      if (res.statusCode === 409 || res.statusCode === 503) resolve(undefined);
      else reject(new Error(`exec answered ${res.statusCode}`));
    });
    ws.once('close', () => reject(new Error(`${argv[0]} ended in the workload: ${out}`)));
    ws.once('error', reject);
  });
}
