/**
 * Reaching a rented workload end to end, against the real auth service, registry and billing and a daemon running an
 * idle workload in the real sandbox: the daemon dials billing's relay (the machine opens no port); the renter's
 * `gpu exec` and `gpu shell` streams run in the workload, with its exit codes and a terminal; anyone else is refused;
 * a stream ends with its session and with its daemon; a second billing instance passes streams to the one holding the
 * machine's connection.
 */
import { staticToken } from '@gpu/client';
import { createLogger } from '@gpu/common';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { execStream, statusCode } from '../../cli/src/commands/reach.ts';
import { ReachLink } from '../src/reach/link.ts';
import type { Entry } from '../src/workloads/entry.ts';
import type { WorkloadRunner } from '../src/workloads/runner.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

const rig = useWorkloadRig({
  billing: {
    reach: { max_streams_per_session: 3, check_interval: '200ms', max_mib_per_second: 1, ping_interval: '1s' },
  },
});
const logger = createLogger({
  service: 'reach-test',
  instanceId: 't',
  level: process.env.DEBUG_LOG ? 'debug' : 'silent',
});

let machine: Awaited<ReturnType<typeof rig.machine>>;
let runner: WorkloadRunner;
let link: ReachLink;
let billingUrl: string;
/** What the link is given of a workload to enter it (a test replaces it to hold a workload as not set up yet). */
let entering = (entry: Entry): Entry => entry;

beforeAll(async () => {
  // A GPU for each test's session (most leave theirs running).
  const gpus = Array.from({ length: 16 }, () => ({ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 }));
  machine = await rig.machine({}, { gpus });
  runner = machine.runner();
  runner.run();
  billingUrl = machine.deps.config.billing_url;
  link = dial();
});

/** The daemon's link to billing's relay, started (as the daemon starts it). */
function dial(): ReachLink {
  const started = new ReachLink({
    config: machine.deps.config,
    logger,
    token: machine.deps.token,
    providerId: () => machine.providerId,
    entryOf: (id) => {
      const entry = runner.entryOf(id);
      return entry && entering(entry);
    },
  });
  started.start();
  return started;
}
afterAll(async () => {
  await link?.stop();
  await runner?.stop();
});

/** An idle workload's session, once it runs. */
async function idleSession() {
  const r = await rig.rent(machine.providerId, 1, { idle: true, max_runtime_seconds: 300 });
  const w = await until(
    () => rig.workloadOf(r.headers, r.id),
    (w) => w.state === 'running',
    30_000,
  );
  expect(w.state).toBe('running');
  return r;
}

/** A stream as `kubectl exec` opens it: its output, errors, status and close, or the refusal's status and problem. */
async function exec(
  base: string,
  headers: Record<string, string>,
  sessionId: string,
  argv: string[],
  opts: {
    input?: string;
    tty?: boolean;
    cols?: number;
    rows?: number;
    keepOpen?: (ws: WebSocket) => void;
    /** Whether the renter's side answers the platform's pings (as every WebSocket client does by itself). */
    autoPong?: boolean;
  } = {},
) {
  const q = new URLSearchParams();
  for (const a of argv) q.append('command', a);
  if (opts.tty) q.set('tty', 'true');
  if (opts.cols) q.set('cols', String(opts.cols));
  if (opts.rows) q.set('rows', String(opts.rows));
  const ws = new WebSocket(
    `${base.replace(/^http/, 'ws')}/api/v1/billing/sessions/${sessionId}/exec?${q}`,
    ['v5.channel.k8s.io'],
    { headers, autoPong: opts.autoPong ?? true },
  );
  const refused = new Promise<{ status: number; problem: Record<string, unknown> }>((resolve) => {
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += String(d);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, problem: JSON.parse(body || '{}') }));
    });
  });
  let out = '';
  let err = '';
  let status: Record<string, unknown> | null = null;
  // Listening from the first moment: output may come with the upgrade's answer.
  ws.on('message', (data: Buffer) => {
    if (data[0] === 1) out += String(data.subarray(1));
    if (data[0] === 2) err += String(data.subarray(1));
    if (data[0] === 3) status = JSON.parse(String(data.subarray(1)));
  });
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
  const opened = new Promise<'open'>((resolve) => ws.once('open', () => resolve('open')));
  const first = await Promise.race([opened, refused]);
  if (first !== 'open') return { refused: first, out: '', err: '', status: null, code: null };
  if (opts.input !== undefined) ws.send(Buffer.concat([Buffer.of(0), Buffer.from(opts.input)]));
  if (!opts.keepOpen) ws.send(Buffer.of(255, 0));
  opts.keepOpen?.(ws);
  const code = await closed;
  return { refused: null, out, err, status: status as Record<string, unknown> | null, code };
}

describe('a renter reaches the workload they rent', () => {
  it('runs a program in it: input passed in, output and errors apart, its exit code', async () => {
    const r = await idleSession();
    const res = await exec(billingUrl, r.headers, r.id, ['sh', '-c', 'cat; echo "to stderr $(hostname)" >&2; exit 3'], {
      input: 'hello from the renter\n',
    });
    expect(res.refused).toBeNull();
    expect(res.out).toBe('hello from the renter\n');
    expect(res.err).toBe('to stderr workload\n');
    expect(res.status).toMatchObject({ status: 'Failure', reason: 'NonZeroExitCode' });
    expect(statusCode(res.status!)).toBe(3);
    const ok = await exec(billingUrl, r.headers, r.id, ['true']);
    expect(ok.status).toEqual({ metadata: {}, status: 'Success' });
  });

  it('starts a program once a workload just reported running can be entered, and says so when it cannot be', async () => {
    const r = await idleSession();
    // Its sandbox still being set up (no process to enter yet) for the first five looks: the program waits for it.
    let looks = 0;
    entering = (entry) => ({ ...entry, process: () => (++looks <= 5 ? null : entry.process()) });
    try {
      const res = await exec(billingUrl, r.headers, r.id, ['echo', 'entered']);
      expect(res.out).toBe('entered\n');
      expect(res.status).toEqual({ metadata: {}, status: 'Success' });
      expect(looks).toBeGreaterThan(5);
      // Never enterable: after the daemon's 15 s, the renter is told, with the exit status of a program not started.
      entering = (entry) => ({ ...entry, process: () => null });
      const never = await exec(billingUrl, r.headers, r.id, ['echo', 'entered']);
      expect(never.out).toBe('');
      expect(never.err).toBe('gpu: the workload is not set up yet\n');
      expect(statusCode(never.status!)).toBe(125);
    } finally {
      entering = (entry) => entry;
      await rig.endSession(r.headers, r.id);
    }
  }, 60_000);

  it("gives `gpu exec` the program's output and exit code, and a terminal its size", async () => {
    const r = await idleSession();
    const ctx = {
      url: billingUrl,
      token: staticToken(r.headers.authorization!.slice('Bearer '.length)),
    } as unknown as Parameters<typeof execStream>[0];
    const written: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array) => {
      written.push(String(chunk));
      return true;
    }) as typeof process.stdout.write;
    let code: number;
    try {
      code = await execStream(ctx, r.id, ['sh', '-c', 'echo "id=$(id -u)"; exit 42'], false);
    } finally {
      process.stdout.write = write;
    }
    expect(code).toBe(42);
    expect(written.join('')).toMatch(/^id=\d+\n$/);
    const tty = await exec(billingUrl, r.headers, r.id, ['stty', 'size'], { tty: true, cols: 132, rows: 43 });
    expect(tty.out.trim()).toBe('43 132');
  });

  it("refuses anyone but the session's renter, and sessions with nothing running to reach", async () => {
    const r = await idleSession();
    const other = await rig.renter();
    const stranger = await exec(billingUrl, other.headers, r.id, ['true']);
    expect(stranger.refused).toMatchObject({ status: 404, problem: { code: 'SESSION_NOT_FOUND' } });
    const unknown = await exec(billingUrl, r.headers, '3f0c5b8e-3a55-4d47-9a3c-3c1f7c1c9d11', ['true']);
    expect(unknown.refused).toMatchObject({ status: 404, problem: { code: 'SESSION_NOT_FOUND' } });
    const bad = await exec(billingUrl, r.headers, 'not-a-session', ['true']);
    expect(bad.refused?.status).toBe(400);
    const noCommand = await exec(billingUrl, r.headers, r.id, []);
    expect(noCommand.refused?.status).toBe(400);
    // A session that runs no workload has nothing to reach.
    const who = await rig.renter();
    const bare = await rig.start(machine.providerId, 1, undefined as unknown as object, who);
    expect(bare.statusCode, bare.body).toBe(201);
    const bareId = bare.json().session.id as string;
    const nothing = await exec(billingUrl, who.headers, bareId, ['true']);
    expect(nothing.refused).toMatchObject({ status: 409, problem: { code: 'NO_WORKLOAD' } });
    expect((await exec(billingUrl, r.headers, bareId, ['true'])).refused?.status).toBe(404);
  });

  it('ends a stream when its session ends, and refuses one into a session that has ended', async () => {
    const r = await idleSession();
    let endedAt = 0;
    const open = exec(billingUrl, r.headers, r.id, ['sleep', '120'], {
      keepOpen: () => {
        setTimeout(() => {
          endedAt = Date.now();
          void rig.endSession(r.headers, r.id);
        }, 500);
      },
    });
    const res = await open;
    // Ended by the session's end, not by its `sleep 120`; the bound leaves a busy machine room.
    expect(Date.now() - endedAt).toBeLessThan(30_000);
    expect(res.status).toMatchObject({ status: 'Failure' });
    const after = await exec(billingUrl, r.headers, r.id, ['true']);
    expect(after.refused).toMatchObject({ status: 409, problem: { code: 'SESSION_NOT_ACTIVE' } });
  });

  it("holds a session's streams to its bytes a second: slowed, never cut", async () => {
    const r = await idleSession();
    const started = Date.now();
    // 3 MiB at 1 MiB a second (one second's worth may pass at once): two seconds at least.
    const res = await exec(billingUrl, r.headers, r.id, ['sh', '-c', 'head -c 3145728 /dev/zero']);
    const took = Date.now() - started;
    expect(res.out.length).toBe(3 * 1024 * 1024);
    expect(res.status).toEqual({ metadata: {}, status: 'Success' });
    expect(took).toBeGreaterThanOrEqual(1_800);
    expect(took).toBeLessThan(30_000);
    // Its GPU back for the tests after it (the machine has eight).
    await rig.endSession(r.headers, r.id);
  });

  it('ends a stream whose renter stopped answering pings (gone without a word), and keeps one that answers', async () => {
    const r = await idleSession();
    const started = Date.now();
    const [silent, answering] = await Promise.all([
      exec(billingUrl, r.headers, r.id, ['sleep', '600'], { keepOpen: () => {}, autoPong: false }),
      exec(billingUrl, r.headers, r.id, ['sleep', '600'], {
        // Closed by the renter once the silent one was let go, well past two ping intervals.
        keepOpen: (ws) => setTimeout(() => ws.close(1000), 6000),
      }),
    ]);
    // Let go within a few intervals of a second; the answering renter's stream stayed until it closed it.
    expect(silent.code).toBe(1006);
    expect(answering.code).toBe(1000);
    expect(Date.now() - started).toBeLessThan(60_000);
    // The machine's GPU for the tests after.
    const ended = await rig.endSession(r.headers, r.id);
    expect(ended.statusCode, ended.body).toBe(200);
  });

  it('holds a session to its most streams at once: 429 past them', async () => {
    const r = await idleSession();
    const held: WebSocket[] = [];
    const opens = [0, 1, 2].map(() =>
      exec(billingUrl, r.headers, r.id, ['sleep', '60'], { keepOpen: (ws) => held.push(ws) }),
    );
    await until(
      async () => held.length,
      (n) => n === 3,
    );
    const fourth = await exec(billingUrl, r.headers, r.id, ['true']);
    expect(fourth.refused).toMatchObject({ status: 429, problem: { code: 'TOO_MANY_STREAMS' } });
    for (const ws of held) ws.close();
    await Promise.all(opens);
  });

  it('admits exactly its most streams when they are opened at once', async () => {
    const r = await idleSession();
    const held: WebSocket[] = [];
    const results = await Promise.all(
      [0, 1, 2, 3, 4].map(async () => {
        let markOpen: (v: 'open') => void = () => {};
        const open = new Promise<'open'>((ok) => {
          markOpen = ok;
        });
        const res = exec(billingUrl, r.headers, r.id, ['sleep', '60'], {
          keepOpen: (ws) => {
            held.push(ws);
            markOpen('open');
          },
        });
        // Each is answered one way or the other: refused, or admitted and held open until closed below.
        const first = await Promise.race([res, open]);
        return { opened: first === 'open', first, res };
      }),
    );
    expect(results.filter((x) => x.opened)).toHaveLength(3);
    const refused = results.filter((x) => !x.opened).map((x) => (x.first as { refused: unknown }).refused);
    expect(refused).toEqual([expect.objectContaining({ status: 429 }), expect.objectContaining({ status: 429 })]);
    for (const ws of held) ws.close();
    await Promise.all(results.map((x) => x.res));
  });

  it('passes a stream reaching another billing instance to the one holding the machine', async () => {
    const r = await idleSession();
    const second = await rig.secondBilling();
    const secondUrl = second.url;
    try {
      const res = await exec(secondUrl, r.headers, r.id, ['sh', '-c', 'echo via-$((1+1)); exit 5']);
      expect(res.refused).toBeNull();
      expect(res.out).toBe('via-2\n');
      expect(statusCode(res.status!)).toBe(5);
      // Its checks ran at the first instance as well: a stranger hears the same 404 there.
      const other = await rig.renter();
      const stranger = await exec(secondUrl, other.headers, r.id, ['true']);
      expect(stranger.refused).toMatchObject({ status: 404, problem: { code: 'SESSION_NOT_FOUND' } });
    } finally {
      await second.close();
    }
  });

  it("ends every stream when the daemon's connection goes, and refuses new ones until it is back", async () => {
    const r = await idleSession();
    let stoppedAt = 0;
    const res = await exec(billingUrl, r.headers, r.id, ['sleep', '120'], {
      keepOpen: () => {
        setTimeout(() => {
          stoppedAt = Date.now();
          void link.stop();
        }, 300);
      },
    });
    // Ended by the lost connection, not by its `sleep 120`; the bound leaves a busy machine room.
    expect(Date.now() - stoppedAt).toBeLessThan(30_000);
    expect(res.status).toMatchObject({ status: 'Failure', message: 'the connection to the machine was lost' });
    const meanwhile = await until(
      () => exec(billingUrl, r.headers, r.id, ['true']),
      (x) => x.refused !== null,
    );
    expect(meanwhile.refused).toMatchObject({ status: 409, problem: { code: 'DAEMON_NOT_CONNECTED' } });
    // A daemon that comes back (a restart) dials again, and the workload can be reached again.
    link = dial();
    const again = await until(
      () => exec(billingUrl, r.headers, r.id, ['echo', 'back']),
      (x) => x.refused === null,
      20_000,
    );
    expect(again.out).toBe('back\n');
  });

  it('lets a connection go whose record failed, so that the machine dials again and every instance finds it', async () => {
    const r = await idleSession();
    const second = await rig.secondBilling();
    const db = rig.billing.db;
    // The next connection's record fails once (the database refuses it), as a database fault would.
    await sql`CREATE SEQUENCE reach_claims_tried`.execute(db);
    await sql`CREATE FUNCTION refuse_first_claim() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('reach_claims_tried') = 1 THEN RAISE EXCEPTION 'the test refuses this claim'; END IF;
        RETURN NEW;
      END $$`.execute(db);
    await sql`CREATE TRIGGER refuse_first_claim BEFORE INSERT OR UPDATE OF link_id ON reach_links
      FOR EACH ROW EXECUTE FUNCTION refuse_first_claim()`.execute(db);
    try {
      await link.stop();
      link = dial();
      // Reached through the instance that does not hold the connection, which finds it by its record: made once the
      // daemon, let go after its first record failed, dialled again (a connection kept unrecorded is found by none).
      const found = await until(
        () => exec(second.url, r.headers, r.id, ['echo', 'found']),
        (x) => x.refused === null,
        30_000,
      );
      expect(found.out).toBe('found\n');
      const { rows } = await sql<{ tried: string }>`SELECT last_value AS tried FROM reach_claims_tried`.execute(db);
      expect(Number(rows[0]!.tried)).toBeGreaterThanOrEqual(2);
    } finally {
      await sql`DROP TRIGGER refuse_first_claim ON reach_links`.execute(db);
      await sql`DROP FUNCTION refuse_first_claim()`.execute(db);
      await sql`DROP SEQUENCE reach_claims_tried`.execute(db);
      await second.close();
      await rig.endSession(r.headers, r.id);
    }
  }, 60_000);
});
