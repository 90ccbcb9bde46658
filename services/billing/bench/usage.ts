/**
 * `pnpm bench billing` (after the ledger benchmark) or `pnpm bench billing usage`:
 * usage updates per second with 1,000 active sessions, over HTTP (the real
 * listening service, keep-alive fetch from concurrent workers) and over NATS
 * (JetStream publishes consumed by the service's durable consumer). About 5 %
 * of the messages are sent twice (a daemon's retry); afterwards every unique
 * message must have exactly one usage record and the ledger must be intact.
 * Writes the `billing-usage` section of docs/benchmarks.md.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { connectPublisher, createLogger, type NatsPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { createTestDatabase, startTestIssuer, testEnv } from '@gpu/common/testing';
import { sql } from 'kysely';
import { machineLine, writeBenchSection } from '../../../scripts/lib/bench-report.ts';
import { startUsageConsumer } from '../src/adapters/usage-consumer.ts';
import { billingContext, buildApp } from '../src/app.ts';
import { billingConfigSchema } from '../src/config.ts';
import { openBillingDatabase } from '../src/db/open.ts';
import { postTransfers } from '../src/domain/ledger.ts';
import { Dec } from '../src/domain/money.ts';
import { startSession } from '../src/domain/session-start.ts';
import { createWallet } from '../src/domain/wallets.ts';
import { checkLedgerInvariant } from './ledger-invariant.ts';

const SESSIONS = 1000;
const TARGET = 2000;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
/** Seconds of the same HTTP load run first, uncounted (JIT warm-up of service and load generator). */
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 5);
const HTTP_WORKERS = Number(process.env.BENCH_CONCURRENCY ?? 64);
/** Reports per request on POST /usage-updates: a daemon on an 8-GPU machine with 8 rentals. */
const HTTP_BATCH = Number(process.env.BENCH_HTTP_BATCH ?? 8);
const NATS_MESSAGES = Number(process.env.BENCH_NATS_MESSAGES ?? 20_000);
const ADDRESS = '11111111111111111111111111111111';

const testDb = await createTestDatabase('billing_usage_bench');
// Access control on, as in production: the service trusts a test issuer's keys, and the load generator sends the
// token of the daemon acting for the provider machine's owner (checked against each session's provider owner).
const issuer = await startTestIssuer({ expiresInSeconds: 24 * 3600 });
const providerOwner = crypto.randomUUID();
const authorization = (await issuer.client('daemon', providerOwner)).headers.authorization;
const config = billingConfigSchema.parse({
  log_level: 'silent',
  access: issuer.accessConfig,
  database: { url: testDb.url, pool_size: 40 },
  billing: { billing_interval: '0s' },
});
const database = await openBillingDatabase(config);
const db = database.db;
const logger = createLogger({ service: 'billing-bench', instanceId: 'bench', level: 'silent' });
const deps = { config, logger, db, chain: null };
const ctx = billingContext(deps);
const app = await buildApp(deps, ctx);
await app.listen({ port: 0, host: '127.0.0.1' });
const { port } = app.server.address() as { port: number };
// The service really verifies: a report without a token is refused.
const anonymous = await fetch(`http://127.0.0.1:${port}/api/v1/billing/usage-update`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: '{}',
});
if (anonymous.status !== 401) throw new Error(`expected 401 without a token, got ${anonymous.status}`);

console.log(`starting ${SESSIONS} sessions`);
const provider = await createWallet(db, {
  ownerType: 'provider',
  ownerId: crypto.randomUUID(),
  holderId: providerOwner,
  solanaAddress: ADDRESS,
});
const sessions: string[] = [];
for (let i = 0; i < SESSIONS; i++) {
  const ownerId = crypto.randomUUID();
  const w = await createWallet(db, { ownerType: 'user', ownerId, solanaAddress: ADDRESS });
  await postTransfers(db, [
    {
      debit: { system: 'chain_incoming' },
      credit: { wallet: w.id, kind: 'available' },
      amount: new Dec(100),
      code: 'deposit',
    },
  ]);
  const r = await startSession(
    ctx,
    {
      actor: UNCHECKED_PRINCIPAL,
      userId: ownerId,
      walletId: w.id,
      providerId: provider.ownerId,
      jobId: `bench-${i}`,
      gpuModel: 'nvidia-geforce-rtx-4090',
      gpuCount: 1,
      requestedVramMb: 24576,
      estimatedPowerW: 450,
    },
    null,
  );
  sessions.push(r.session.id);
}
await sql`ANALYZE`.execute(db);

let seq = 0;
const message = (prefix: string) => {
  const n = seq++;
  return {
    session_id: sessions[n % SESSIONS]!,
    timestamp: new Date().toISOString(),
    gpu_utilization: 90,
    power_draw_w: 400 + (n % 50),
    message_id: `${prefix}-${n}`,
  };
};
const usageCount = async (prefix: string) =>
  Number(
    (
      await sql<{ n: string }>`SELECT count(*) AS n FROM usage_records WHERE message_id LIKE ${`${prefix}-%`}`.execute(
        db,
      )
    ).rows[0]!.n,
  );

interface HttpRun {
  unique: number;
  sent: number;
  requests: number;
  errors: number;
  seconds: number;
  records: number;
  cpu: NodeJS.CpuUsage;
}

/** Runs the HTTP load generator (its own process: bench/usage-http-client.ts) with `batch` reports per request. */
async function httpLoad(batch: number, prefix: string): Promise<HttpRun> {
  console.log(`HTTP: ${HTTP_WORKERS} connections, ${batch} report(s) per request, for ${SECONDS} s`);
  const client = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('./usage-http-client.ts', import.meta.url))],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  client.stdin.end(
    JSON.stringify({
      port,
      sessions,
      seconds: SECONDS,
      warmupSeconds: WARMUP_SECONDS,
      workers: HTTP_WORKERS,
      batch,
      prefix,
      authorization,
    }),
  );
  // The service's CPU is counted from the end of the warm-up (the client's `warm` line) to the end of the run.
  let cpu: NodeJS.CpuUsage | undefined;
  let out = '';
  client.stdout.on('data', (chunk) => {
    out += chunk;
    if (!cpu && out.includes('warm\n')) cpu = process.cpuUsage();
  });
  const [exitCode] = (await once(client, 'close')) as [number | null];
  if (exitCode !== 0 || !cpu) throw new Error(`HTTP load generator exited with ${exitCode}`);
  const counts = JSON.parse(out.slice(out.indexOf('warm\n') + 5)) as Omit<HttpRun, 'records' | 'cpu'>;
  return { ...counts, cpu: process.cpuUsage(cpu), records: await usageCount(prefix) };
}

const single = await httpLoad(1, 'http');
const batched = await httpLoad(HTTP_BATCH, 'httpb');

// NATS
console.log(`NATS: ${NATS_MESSAGES} messages`);
const publisher = (await connectPublisher({ url: testEnv.natsUrl, name: 'billing-bench' })) as NatsPublisher;
const prefix = 'bench.usage';
const stream = `BENCH_USAGE_${Date.now()}`;
const consumer = await startUsageConsumer({
  connection: publisher.connection,
  ctx,
  verifier: app.tokenVerifier,
  prefix,
  logger,
  stream,
});
const natsHeaders = { Authorization: authorization };
const natsCpu = process.cpuUsage();
const natsStarted = Date.now();
let natsSent = 0;
const publishing = (async () => {
  const batch: Promise<unknown>[] = [];
  for (let i = 0; i < NATS_MESSAGES; i++) {
    const m = message('nats');
    batch.push(publisher.publish(`${prefix}.${m.session_id}`, m, { msgId: m.message_id, headers: natsHeaders }));
    natsSent++;
    if (i % 20 === 0) {
      batch.push(
        publisher.publish(`${prefix}.${m.session_id}`, m, { msgId: `${m.message_id}-retry`, headers: natsHeaders }),
      );
      natsSent++;
    }
    if (batch.length >= 256) await Promise.all(batch.splice(0));
  }
  await Promise.all(batch);
})();
let natsRecords = 0;
while (natsRecords < NATS_MESSAGES && Date.now() - natsStarted < 120_000) {
  await new Promise((r) => setTimeout(r, 100));
  natsRecords = await usageCount('nats');
}
await publishing;
const natsSeconds = (Date.now() - natsStarted) / 1000;
const natsCpuUsed = process.cpuUsage(natsCpu);
await new Promise((r) => setTimeout(r, 1000)); // let the retries drain
natsRecords = await usageCount('nats');
await consumer.stop();

const c = await checkLedgerInvariant(db);
const balanced = c.intact;
const natsRate = natsRecords / natsSeconds;
const cpuMs = (u: NodeJS.CpuUsage, n: number) => ((u.user + u.system) / 1000 / Math.max(n, 1)).toFixed(2);
const met = (r: number) => (r >= TARGET ? 'met' : 'NOT met');
const httpRow = (what: string, r: HttpRun) => {
  const rate = r.unique / r.seconds;
  return `| ${what} | ${Math.round(rate)} (${met(rate)}) | ${Math.round(r.requests / r.seconds)} | ${r.unique} | ${r.sent} | ${r.records} | ${r.errors} | ${cpuMs(r.cpu, r.sent)} |`;
};
const exactlyOnce =
  single.records === single.unique && batched.records === batched.unique && natsRecords === NATS_MESSAGES;

const md = `## billing-usage

${machineLine()}

Usage updates applied per second with ${SESSIONS.toLocaleString('en')} active sessions (each update: lock the session,
de-duplicate by message ID, bill elapsed full minutes, check the hold, update power, insert the usage record; updates
that arrive together share one database transaction: group commit, see the service README).
HTTP: ${HTTP_WORKERS} keep-alive connections (closed loop) against the listening service for ${SECONDS} s, after
${WARMUP_SECONDS} s of the same load left uncounted (JIT warm-up; its CPU is not in the CPU column either), from a
load generator that is a separate Node process on the same machine; first one report per request
(\`POST /usage-update\`), then ${HTTP_BATCH} reports per request (\`POST /usage-updates\`, a daemon reporting the
${HTTP_BATCH} rentals of an ${HTTP_BATCH}-GPU machine). NATS: ${NATS_MESSAGES.toLocaleString('en')} JetStream publishes
consumed by the durable consumer (up to 512 in hand), timed from the first publish to the last record; the publisher
runs in the service's process, so its CPU column includes publishing. One request or message in 20 is sent twice (a
retry). Load generator, service, PostgreSQL and NATS share the machine's 2 cores.

| path | updates/s (target ≥ ${TARGET}) | requests/s | unique updates | updates sent | usage records | errors | service CPU ms/update |
|---|---|---|---|---|---|---|---|
${httpRow('HTTP, 1 report per request', single)}
${httpRow(`HTTP, ${HTTP_BATCH} reports per request`, batched)}
| NATS | ${Math.round(natsRate)} (${met(natsRate)}) | — | ${NATS_MESSAGES} | ${natsSent} | ${natsRecords} | — | ${cpuMs(natsCpuUsed, natsSent)} |

Exactly once: ${exactlyOnce ? '**yes**' : '**NO**'} (usage records = unique updates). Ledger afterwards:
${balanced ? '**balanced**' : '**BROKEN**'} (${c.badBalance} balance mismatches, ${c.negative} negative, accounts sum to
${c.total}, ${c.lockedMismatch} hold mismatches).
`;
writeBenchSection('billing-usage', md);
const jsm = await (await import('@nats-io/jetstream')).jetstreamManager(publisher.connection);
await jsm.streams.delete(stream).catch(() => {});
await publisher.close();
await app.close();
await database.close();
await testDb.drop();
await issuer.close();
if (!balanced || !exactlyOnce || single.errors + batched.errors > 0) process.exit(1);
