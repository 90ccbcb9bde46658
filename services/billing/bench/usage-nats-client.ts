/**
 * The NATS load generator of the usage benchmark (bench/usage.ts), a process of its own so that its CPU is not
 * the service's: publishes `messages` usage messages to JetStream (`<prefix>.<session_id>`, round robin over the
 * sessions, each with its `Nats-Msg-Id` and the daemon's `Authorization` header), up to 256 publishes awaiting
 * their acknowledgement at once; one message in 20 is published a second time under another message ID (a
 * daemon's retry of the same report: its `message_id` de-duplicates it in the service). Reads its job as JSON on
 * stdin, prints `start` when it begins publishing, then its counts and the CPU it used as JSON on stdout.
 */
import { connectPublisher, type NatsPublisher } from '@gpu/common';

interface Job {
  natsUrl: string;
  /** The `.creds` file to connect with (the test server runs in operator mode). */
  natsCredentials: string;
  prefix: string;
  sessions: string[];
  messages: number;
  /** Message IDs are `<idPrefix>-<n>`. */
  idPrefix: string;
  authorization: string;
}

const job = JSON.parse(await new Response(process.stdin as unknown as ReadableStream).text()) as Job;
const publisher = (await connectPublisher({
  url: job.natsUrl,
  credentials: job.natsCredentials,
  name: 'billing-bench-load',
})) as NatsPublisher;
const headers = { Authorization: job.authorization };

process.stdout.write('start\n');
const cpuBefore = process.cpuUsage();
let sent = 0;
const pending: Promise<unknown>[] = [];
for (let n = 0; n < job.messages; n++) {
  const m = {
    session_id: job.sessions[n % job.sessions.length]!,
    timestamp: new Date().toISOString(),
    gpu_utilization: 90,
    power_draw_w: 400 + (n % 50),
    message_id: `${job.idPrefix}-${n}`,
  };
  const subject = `${job.prefix}.${m.session_id}`;
  pending.push(publisher.publish(subject, m, { msgId: m.message_id, headers }));
  sent++;
  if (n % 20 === 0) {
    pending.push(publisher.publish(subject, m, { msgId: `${m.message_id}-retry`, headers }));
    sent++;
  }
  if (pending.length >= 256) await Promise.all(pending.splice(0));
}
await Promise.all(pending);
const cpu = process.cpuUsage(cpuBefore);
await publisher.close();
process.stdout.write(JSON.stringify({ sent, cpuMs: (cpu.user + cpu.system) / 1000 }));
