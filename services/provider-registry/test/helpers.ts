/** Test wiring: a migrated database per file, an app on it, NATS events, request bodies. */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  connectPublisher,
  createLogger,
  type Database,
  type EventPublisher,
  openDatabase,
  serviceMigrator,
  type TokenVerifier,
} from '@gpu/common';
import {
  type Caller,
  createTestDatabase,
  injectAs,
  startTestIssuer,
  type TestDatabase,
  type TestIssuer,
  testEnv,
} from '@gpu/common/testing';
import { connect, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import type { Kysely, Migrator } from 'kysely';
import { buildApp, type RegistryApp } from '../src/app.ts';
import { type RegistryConfig, registryConfigSchema } from '../src/config.ts';
import { migrateRegistry } from '../src/db/migrate.ts';
import { migrations } from '../src/db/migrations/index.ts';
import type { RegistryDB } from '../src/db/schema.ts';

export interface Harness {
  /** The app; its `inject` sends the admin's token unless the request names its own `authorization`. */
  app: RegistryApp;
  database: Database<RegistryDB>;
  testDb: TestDatabase;
  config: RegistryConfig;
  subject: string;
  /** The issuer the app trusts (tokens for any caller). */
  issuer: TestIssuer;
  /** An admin: the default caller of the tests that are not about access. */
  admin: Caller;
  close(): Promise<void>;
}

export async function migratedDatabase(url: string): Promise<Database<RegistryDB>> {
  const database = await openDatabase<RegistryDB>({ url, poolSize: 10, connectTimeoutMs: 2000 });
  await migrateRegistry(database.db as Kysely<unknown>);
  return database;
}

export interface HarnessOptions {
  config?: Record<string, unknown>;
  /** `messaging.subject_identity`: heartbeats whose subject names their sender (default off). */
  subjectIdentity?: boolean;
  /** Publish events to the test NATS (default true). */
  nats?: boolean;
  /** Publish to this NATS instead of the shared test server (a test's own, which it stops). */
  natsUrl?: string;
  /** `messaging.nats_credentials` (default: the shared test server's user; none for a test's own server). */
  natsCredentials?: string;
  verifier?: TokenVerifier;
  /** Run the periodic offline sweep (default false: tests call `registry.sweepOffline()`). */
  sweeper?: boolean;
  /** Reuse this database instead of creating one. */
  testDb?: TestDatabase;
  /** Trust this issuer (two apps of one test); a new one otherwise. */
  issuer?: TestIssuer;
  /** Consume billing's session events (on subjects of the harness's own: `messaging.subjects.billing_events`). */
  consumeSessionEvents?: boolean;
  /** Take heartbeats from NATS (on a subject of the harness's own: `messaging.subjects.heartbeats`). */
  takeHeartbeats?: boolean;
  /** The most NATS heartbeats one daemon client has in hand at once (the app's `heartbeatsPerClient`). */
  heartbeatsPerClient?: number;
  /** The heartbeats' subject prefix instead of one of the harness's own (auth's NATS users must name it too). */
  heartbeatSubject?: string;
  /** Where the app logs, at `info` (default: nowhere, or errors to stdout with DEBUG_LOG set). */
  logDestination?: Parameters<typeof createLogger>[0]['destination'];
}

/** A registry app on a fresh, migrated database, publishing to a subject of its own. */
export async function startHarness(opts: HarnessOptions = {}): Promise<Harness> {
  const testDb = opts.testDb ?? (await createTestDatabase('registry'));
  const issuer = opts.issuer ?? (await startTestIssuer());
  const admin = await issuer.user(['admin']);
  const suffix = randomBytes(4).toString('hex');
  const config = registryConfigSchema.parse({
    log_level: 'silent',
    access: issuer.accessConfig,
    database: { url: testDb.url },
    messaging: {
      nats_url: opts.nats === false ? '' : (opts.natsUrl ?? testEnv.natsUrl),
      // The tests' NATS server runs in operator mode; a dedicated one (`natsUrl`) takes anyone.
      nats_credentials: opts.natsCredentials ?? (opts.nats === false || opts.natsUrl ? '' : testEnv.natsCredentials),
      subjects: {
        status: `test.${suffix}.registry.providers.status`,
        billing_events: `test.${suffix}.billing.events`,
        heartbeats: opts.heartbeatSubject ?? `test.${suffix}.registry.heartbeats`,
      },
      stream: `TEST_REGISTRY_${suffix}`,
      subject_identity: opts.subjectIdentity ?? false,
    },
    ...opts.config,
  });
  const subject = config.messaging.subjects.status;
  const logger = createLogger({
    service: 'provider-registry',
    instanceId: 'test',
    level: opts.logDestination ? 'info' : process.env.DEBUG_LOG ? 'error' : 'silent',
    ...(opts.logDestination ? { destination: opts.logDestination } : {}),
  });
  const database = await migratedDatabase(testDb.url);
  const publisher: EventPublisher = await connectPublisher({
    url: config.messaging.nats_url,
    credentials: config.messaging.nats_credentials,
    stream: { name: config.messaging.stream, subjects: [subject] },
  });
  const app = await buildApp({
    config,
    logger,
    database,
    publisher,
    verifier: opts.verifier,
    sweeper: opts.sweeper ?? false,
    consumeSessionEvents: opts.consumeSessionEvents,
    takeHeartbeats: opts.takeHeartbeats,
    heartbeatsPerClient: opts.heartbeatsPerClient,
  });
  await app.ready();
  // Tests that are not about access call as an admin, with a real token the app verifies.
  injectAs(app, admin);
  return {
    app,
    database,
    testDb,
    config,
    subject,
    issuer,
    admin,
    close: async () => {
      await app.close();
      await publisher.close();
      await database.close();
      if (!opts.issuer) await issuer.close();
    },
  };
}

/** Collects the JSON messages (with headers) published on a subject. */
export class EventCollector {
  readonly messages: { data: Record<string, unknown>; msgId?: string; correlationId?: string }[] = [];
  private constructor(
    private readonly nc: NatsConnection,
    private readonly sub: Subscription,
  ) {}

  static async start(subject: string): Promise<EventCollector> {
    const nc = await connect(testEnv.natsConnectOptions());
    const sub = nc.subscribe(subject);
    const collector = new EventCollector(nc, sub);
    void (async () => {
      for await (const m of sub) {
        collector.messages.push({
          data: m.json(),
          msgId: m.headers?.get('Nats-Msg-Id'),
          correlationId: m.headers?.get('X-Correlation-ID'),
        });
      }
    })();
    await nc.flush();
    return collector;
  }

  /** Events about one provider. */
  about(providerId: string) {
    return this.messages.filter((m) => m.data.provider_id === providerId);
  }

  /**
   * Waits until `predicate` holds for the collected messages (at most `ms`: generous, as it costs nothing when they
   * arrive, and a busy machine can be slow to deliver them).
   */
  async waitFor(predicate: () => boolean, ms = 20_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!predicate()) {
      if (Date.now() > deadline) throw new Error(`events did not arrive: ${JSON.stringify(this.messages)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async close(): Promise<void> {
    this.sub.unsubscribe();
    await this.nc.drain();
  }
}

let counter = 0;

/** A GPU of the registration body. */
export function gpu(over: Record<string, unknown> = {}) {
  return {
    model_name: 'NVIDIA A100-SXM4-80GB',
    vram: 81920,
    driver_version: '550.54.15',
    architecture: 'Ampere',
    compute_capability: '8.0',
    cuda_cores: 6912,
    tensor_cores: 432,
    memory_bandwidth: 2039,
    power_consumption: 400,
    is_healthy: true,
    ...over,
  };
}

/** A RegisterProviderRequest with a unique name. */
export function providerBody(over: Record<string, unknown> = {}) {
  counter += 1;
  return {
    owner_id: 'owner-1',
    name: `rig-${counter}-${randomBytes(3).toString('hex')}`,
    hostname: `rig-${counter}.example.net`,
    ip_address: '203.0.113.10',
    location: 'eu-west',
    metadata: { rack: 'r1', tags: ['a', 'b'] },
    gpus: [gpu()],
    ...over,
  };
}

/**
 * Registers a provider through the API and returns its body. `status: 'busy'` registers it idle and rents it (a
 * session reported as billing does: only a running session makes a machine busy).
 */
export async function register(app: RegistryApp, over: Record<string, unknown> = {}) {
  const { status, ...rest } = over;
  const body = providerBody(status === 'busy' ? rest : over);
  const res = await app.inject({ method: 'POST', url: '/providers', payload: body });
  if (res.statusCode !== 201) throw new Error(`register failed: ${res.statusCode} ${res.body}`);
  const provider = res.json() as { id: string; status: string; last_seen_at: string; [k: string]: unknown };
  if (status !== 'busy') return provider;
  await rent(app, provider.id);
  return { ...provider, status: 'busy' };
}

/** What the harness's billing holds per machine: each session's GPUs (null: every GPU of the machine). */
const leases = new WeakMap<RegistryApp, Map<string, Map<string, readonly number[] | null>>>();
/** The harness's statements' versions: greater with each (one counter for every machine is as good as one each). */
let version = 0;

/**
 * Posts one of billing's messages to the registry's inbox (`POST /messages`, as the harness's admin or with
 * `headers`), in the envelope billing's outbox writes, as billing does without NATS; the response.
 */
export function deliver(
  app: RegistryApp,
  kind: string,
  data: Record<string, unknown>,
  headers: Record<string, string> = {},
) {
  return app.inject({
    method: 'POST',
    url: '/messages',
    headers,
    payload: { event_id: randomUUID(), kind, occurred_at: new Date().toISOString(), ...data },
  });
}

/** States the GPUs billing holds on the machine (`lease.held`) with a version greater than any before. */
export async function stateHeld(app: RegistryApp, providerId: string, gpuIndices: readonly number[]) {
  version += 1;
  const res = await deliver(app, 'lease.held', { provider_id: providerId, version, gpu_indices: gpuIndices });
  if (res.statusCode !== 200) throw new Error(`stating held GPUs failed: ${res.statusCode} ${res.body}`);
  return res.json() as { kind: string; outcome: string };
}

/** States what the harness's billing holds on the machine now: every session's GPUs. */
async function stateLeases(app: RegistryApp, providerId: string) {
  const held = new Set<number>();
  const sessions = leases.get(app)?.get(providerId) ?? new Map();
  const machine = (await app.inject({ url: `/providers/${providerId}` })).json() as { gpus?: unknown[] };
  for (const gpus of sessions.values()) {
    for (const i of gpus ?? (machine.gpus ?? []).map((_, i) => i)) held.add(i);
  }
  return stateHeld(
    app,
    providerId,
    [...held].sort((a, b) => a - b),
  );
}

/**
 * A rental session starts on the provider holding `gpus` (default: every GPU), as billing states it; the provider
 * goes idle -> busy once fully rented. The session's ID.
 */
export async function rent(
  app: RegistryApp,
  providerId: string,
  sessionId: string = randomUUID(),
  gpus: readonly number[] | null = null,
) {
  const byMachine = leases.get(app) ?? new Map<string, Map<string, readonly number[] | null>>();
  leases.set(app, byMachine);
  const sessions = byMachine.get(providerId) ?? new Map<string, readonly number[] | null>();
  byMachine.set(providerId, sessions);
  sessions.set(sessionId, gpus);
  await stateLeases(app, providerId);
  return sessionId;
}

/**
 * The session ends, as billing does it: its GPUs stated free, and its end reported for the machine's reliability
 * (`session.completed`, with `end_reason` when given).
 */
export async function endRental(app: RegistryApp, providerId: string, sessionId: string, endReason?: string) {
  leases.get(app)?.get(providerId)?.delete(sessionId);
  await stateLeases(app, providerId);
  const res = await deliver(app, 'session.completed', {
    session: { id: sessionId, provider_id: providerId, end_reason: endReason ?? null },
  });
  if (res.statusCode !== 200) throw new Error(`session end failed: ${res.statusCode} ${res.body}`);
}

/** Moves a provider's last heartbeat into the past, as if it had been silent for `ms`. */
export async function ageProvider(database: Database<RegistryDB>, id: string, ms: number) {
  await database.db
    .updateTable('provider_liveness')
    .set({ last_seen_at: new Date(Date.now() - ms) })
    .where('provider_id', '=', id)
    .execute();
}

/** Kysely's migrator over the registry's migrations and tables, for a test that migrates down to a given one. */
// biome-ignore lint/suspicious/noExplicitAny: migrations run on Kysely<any>, as the migrator does
export function registryMigrator(db: Kysely<any>): Migrator {
  return serviceMigrator(db, 'provider-registry', migrations);
}
