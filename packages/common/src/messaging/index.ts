export {
  MessageBus,
  type MessageHandler,
  type MessageMeta,
  onMessage,
  startBusConsumer,
} from './bus.ts';
export {
  consumerPendingGauge,
  type DurableConsumer,
  type DurableConsumerOptions,
  messageTraceContext,
  type Settlement,
  startDurableConsumer,
} from './consumer.ts';
export { natsConnectedGauge, outboxMetrics } from './metrics.ts';
export {
  createNatsTrust,
  DAEMON_NATS_LIMITS,
  DAEMON_NATS_SUBJECTS,
  type DaemonNatsSubjects,
  daemonInboxPrefix,
  daemonNatsPermissions,
  isDaemonInbox,
  type NatsIssuer,
  type NatsPermissions,
  type NatsTrust,
  natsPublicKeys,
  natsServerConfig,
  natsUserCreds,
  natsUserJwt,
  parseNatsIssuer,
  parseNatsTrust,
  subjectPrincipal,
  subjectSender,
} from './nats-auth.ts';
export { type NatsSetup, PLATFORM_NATS_USERS, serviceInboxPrefix, writeNatsSetup } from './nats-setup.ts';
export {
  eventBody,
  type NewEvent,
  Outbox,
  type OutboxDatabase,
  type OutboxEventTable,
  OutboxRelay,
  type OutboxRelayOptions,
} from './outbox.ts';
export { createOutboxTable, dropOutboxTable } from './outbox-table.ts';
export {
  type ConnectPublisherOptions,
  connectPublisher,
  type EventPublisher,
  fileCredentials,
  NatsPublisher,
  NoopPublisher,
  type PublishOptions,
} from './publisher.ts';
export {
  type RequestServer,
  type RequestServerOptions,
  serveRequests,
  type TakenMessage,
  trustsSubjects,
} from './requests.ts';
export { awaitStream, type EnsureStreamOptions, ensureStream } from './stream.ts';
