/**
 * The NATS load generator of the usage benchmark (bench/usage.ts), a process of its own so that its CPU is not
 * the service's: publishes `messages` usage reports to JetStream, round robin over the sessions, 256 publishes
 * awaiting their acknowledgement at all times (a window that slides: a new one leaves as soon as one is answered, as
 * a fleet of independent daemons sends them, never in waves). One report per message on `<prefix>.<session_id>` with the daemon's
 * `Authorization` header; or, with `identity`, as a daemon holding the NATS user auth issues it: `perMessage` reports
 * in one core NATS request (`{reports: [...]}`: a daemon of an 8-GPU machine with 8 rentals) on
 * `<reportsPrefix>.<owner ID>.<client ID>.<machine>`, no token, each awaiting billing's answer (given once applied).
 * One message in 20 is sent a second time (under another message ID: a daemon's retry of the same reports, whose
 * `message_id`s de-duplicate them in the service). Reads its
 * job as JSON on stdin, prints `start` when it begins publishing, then its counts and the CPU it used as JSON on
 * stdout.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, daemonInboxPrefix, type NatsPublisher } from '@gpu/common';

interface Job {
  natsUrl: string;
  /** The `.creds` file to connect with (the test server runs in operator mode). */
  natsCredentials: string;
  prefix: string;
  /** The prefix of usage requests (with `identity`). */
  reportsPrefix?: string;
  sessions: string[];
  /** Reports in all (unique). */
  messages: number;
  /** Message IDs are `<idPrefix>-<n>`. */
  idPrefix: string;
  authorization: string;
  /** Publish as this daemon client of this owner, on subjects naming them, with no token. */
  identity?: { owner: string; client: string };
  /** Reports per message (with `identity`; default 1). */
  perMessage?: number;
}

const job = JSON.parse(await new Response(process.stdin as unknown as ReadableStream).text()) as Job;
const publisher = (await connectPublisher({
  url: job.natsUrl,
  credentials: job.natsCredentials,
  name: 'billing-bench-load',
  // Answers come only to the daemon client's own inbox.
  ...(job.identity ? { inboxPrefix: daemonInboxPrefix(job.identity.client) } : {}),
})) as NatsPublisher;
const headers: Record<string, string> = job.identity ? {} : { Authorization: job.authorization };
const perMessage = job.identity ? (job.perMessage ?? 1) : 1;
const machine = randomUUID();

/** A usage request, resolved once billing answered that every report in it was applied (or was a duplicate). */
async function request(subject: string, body: object): Promise<void> {
  const answer = (await publisher.connection.request(subject, JSON.stringify(body), { timeout: 120_000 })).json<{
    results?: { status: number }[];
  }>();
  if (!answer.results?.every((r) => r.status === 200 || r.status === 201)) {
    throw new Error(`billing did not apply a usage request: ${JSON.stringify(answer).slice(0, 300)}`);
  }
}

const report = (n: number) => ({
  session_id: job.sessions[n % job.sessions.length]!,
  timestamp: new Date().toISOString(),
  gpu_utilization: 90,
  power_draw_w: 400 + (n % 50),
  message_id: `${job.idPrefix}-${n}`,
});

/** Requests or publishes awaiting their answer at once. */
const WINDOW = 256;
let inFlight = 0;
let failure: unknown = null;
let slotFree: (() => void) | null = null;
const track = (p: Promise<unknown>) => {
  inFlight++;
  p.catch((err) => (failure ??= err)).finally(() => {
    inFlight--;
    slotFree?.();
    slotFree = null;
  });
};
/** Resolves once fewer than `max` are awaiting their answer. */
const below = async (max: number) => {
  while (inFlight >= max) await new Promise<void>((r) => (slotFree = r));
  if (failure) throw failure;
};

process.stdout.write('start\n');
const cpuBefore = process.cpuUsage();
let sent = 0;
let messages = 0;
for (let n = 0; n < job.messages; n += perMessage) {
  let subject: string;
  let body: object;
  if (job.identity) {
    const reports = [];
    for (let k = n; k < Math.min(n + perMessage, job.messages); k++) reports.push(report(k));
    subject = `${job.reportsPrefix}.${job.identity.owner}.${job.identity.client}.${machine}`;
    body = { reports };
  } else {
    const m = report(n);
    subject = `${job.prefix}.${m.session_id}`;
    body = m;
  }
  const count = 'reports' in body ? (body.reports as unknown[]).length : 1;
  const send = (retry: boolean) =>
    job.identity
      ? request(subject, body)
      : publisher.publish(subject, body, { msgId: `${job.idPrefix}-m${messages}${retry ? '-retry' : ''}`, headers });
  await below(WINDOW);
  track(send(false));
  sent += count;
  if (messages % 20 === 0) {
    await below(WINDOW);
    track(send(true));
    sent += count;
  }
  messages++;
}
await below(1);
const cpu = process.cpuUsage(cpuBefore);
await publisher.close();
process.stdout.write(
  JSON.stringify({ sent, messages: messages + Math.ceil(messages / 20), cpuMs: (cpu.user + cpu.system) / 1000 }),
);
