/**
 * The provider daemon process: `DAEMON_CONFIG_FILE=daemon.yaml node --import tsx src/main.ts`.
 * Stops cleanly on SIGINT/SIGTERM: the machine is marked offline first (off the market, its sessions ended: at most
 * `LEAVE_MARKET_TIMEOUT_MS`), then its workloads stop. A start-up that cannot go on (a configuration file that does not exist, an
 * unreadable credentials file, invalid settings) is one line on standard error and exit status 1, as for the services.
 */
import { clientCredentials } from '@gpu/client';
import {
  connectPublisher,
  createLogger,
  durationMs,
  NatsPublisher,
  NoopPublisher,
  startOrExit,
  startTracing,
  tuneGcForStreams,
} from '@gpu/common';
import { loadDaemonConfig } from './config.ts';
import { type DaemonCredentials, loadCredentials } from './credentials.ts';
import { ProviderDaemon } from './daemon.ts';
import { gpuSource } from './gpu/source.ts';
import { natsHeartbeats } from './heartbeats.ts';
import { issuedNatsIdentity } from './nats-user.ts';
import { ReachLink } from './reach/link.ts';
import { UsageReporter } from './usage.ts';
import { WorkloadRunner } from './workloads/runner.ts';

/** The longest a clean stop waits for the registry to take the machine off the market. */
const LEAVE_MARKET_TIMEOUT_MS = 5_000;

// Forwarded ports' bytes pass through the daemon (reach/ports.ts).
tuneGcForStreams();

startOrExit(async () => {
  const config = loadDaemonConfig();
  // Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set: each call to the platform carries its traceparent.
  const tracing = await startTracing({ service: 'provider-daemon' });
  const logger = createLogger({
    service: 'provider-daemon',
    instanceId: config.provider.name,
    level: config.log_level,
  });
  let credentials: DaemonCredentials;
  try {
    credentials = loadCredentials(config);
  } catch (err) {
    logger.fatal((err as Error).message);
    process.exit(1);
  }
  const gpus = gpuSource(config.gpu);
  if (gpus.kind === 'simulated') logger.warn('reporting a SIMULATED machine (gpu.source: simulated), not real GPUs');
  const token = clientCredentials({ authUrl: config.auth_url, ...credentials });
  // With NATS and no credentials file of its own, the daemon asks auth for a NATS user (none when auth issues none).
  const identity =
    config.nats_url && !config.nats_credentials
      ? await issuedNatsIdentity({
          authUrl: config.auth_url,
          token,
          timeoutMs: durationMs(config.request_timeout),
          logger,
        })
      : undefined;
  // Usage over NATS when configured (JetStream with a token; with a NATS user of its own, requests billing answers),
  // else over HTTP. NATS out of reach at the start (30 s of tries) leaves HTTP alone: the machine keeps beating.
  const publisher = await connectPublisher({
    url: config.nats_url,
    credentials: config.nats_credentials,
    ...(identity ? { authenticator: identity.authenticator, inboxPrefix: identity.inboxPrefix } : {}),
    name: `provider-daemon-${config.provider.name}`,
    stream: { name: 'BILLING_USAGE', subjects: [`${config.usage_subject}.>`] },
    // An issued user may not manage streams: billing makes its usage stream.
    ensureStream: !identity,
    logger,
  }).catch((err: Error) => {
    logger.error({ err: err.message }, 'NATS is out of reach: heartbeats and usage go over HTTP until a restart');
    return new NoopPublisher();
  });
  const natsLive = () => publisher instanceof NatsPublisher && publisher.connected;
  const natsIdentity =
    identity && publisher instanceof NatsPublisher
      ? { owner: identity.owner, client: identity.client, connection: publisher.connection }
      : undefined;
  const usage = new UsageReporter({ config, logger, token, publisher, natsIdentity, natsLive });
  // Heartbeats over NATS too when configured (answered by a registry instance; over HTTP when none answers).
  const beats =
    publisher instanceof NatsPublisher
      ? natsHeartbeats({
          connection: publisher.connection,
          subject: config.heartbeat_subject,
          token,
          identity: natsIdentity,
          timeoutMs: durationMs(config.request_timeout),
          live: natsLive,
          logger,
        })
      : undefined;
  const daemon = new ProviderDaemon({
    config,
    logger,
    gpus,
    token,
    usage,
    beats,
    // Attached, the runner polls at once and listens for the machine's nudges, rather than at its next poll.
    onAttached: () => workloads?.poll(),
    // The record states the disk each workload is given: what the machine's disk holds, at most the configured.
    ...(config.workloads.enabled ? { workloadDiskMb: (n: number) => workloads!.diskMb(n) } : {}),
  });
  const workloads: WorkloadRunner | null = config.workloads.enabled
    ? new WorkloadRunner({
        config,
        logger,
        token,
        gpus,
        providerId: () => daemon.providerId,
        sessions: (id) => usage.runningSessions(id),
        traces: usage.traces,
        // With NATS, billing's nudges on the machine's subject start and stop workloads at once.
        ...(publisher instanceof NatsPublisher
          ? {
              nudgeOwner: natsIdentity?.owner,
              nudges: (subject: string, onMessage: () => void) =>
                publisher.connection.subscribe(subject, { callback: () => onMessage() }),
            }
          : {}),
      })
    : null;
  // Renters reach their workloads through an outbound connection to billing's relay (the machine opens no port).
  const reach =
    workloads && config.reach.enabled
      ? new ReachLink({
          config,
          logger,
          token,
          providerId: () => daemon.providerId,
          entryOf: (id) => workloads.entryOf(id),
        })
      : null;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => daemon.stop());
  workloads?.run();
  reach?.start();
  await daemon.run();
  // A clean stop takes the machine off the market before anything else, so that no renter starts on it meanwhile.
  await daemon.leaveMarket(Math.min(durationMs(config.request_timeout), LEAVE_MARKET_TIMEOUT_MS));
  await reach?.stop();
  await workloads?.stop();
  await publisher.close();
  identity?.stop();
  await tracing?.shutdown().catch(() => {});
  logger.info('stopped');
});
