export type { FastifyPluginAsyncZod as RoutePlugin, ZodTypeProvider } from 'fastify-type-provider-zod';
export {
  type AccessControlOptions,
  accessControl,
  assertScope,
  authenticate,
  bearerTokenOf,
  callerOf,
  isPublicRoute,
  verifyBearer,
} from './auth/access-control.ts';
export {
  hasRole,
  isPrivileged,
  mayActFor,
  type Principal,
  principalOf,
  UNCHECKED_PRINCIPAL,
} from './auth/principal.ts';
export {
  CLIENT_ROLES,
  type ClientRole,
  isClientRole,
  ROLES,
  type Role,
  USER_ROLES,
  type UserRole,
} from './auth/roles.ts';
export { isScope, SCOPE_MEANINGS, SCOPES, type Scope, scopeAllows } from './auth/scopes.ts';
export {
  type AccessTokenClaims,
  createTokenVerifier,
  type TokenVerifier,
  type TokenVerifierOptions,
} from './auth/token-verifier.ts';
export {
  assertVerifiedEmail,
  VERIFIED_EMAIL_ACTIONS,
  type VerifiedEmailAction,
} from './auth/verified-email.ts';
export { coalesceWrites } from './coalesce-writes.ts';
export { CountsByKey, forEachLimited, type Tally } from './concurrency.ts';
export { ConfigError, configWarnings, type LoadConfigOptions, loadConfig } from './config.ts';
export {
  accessSchema,
  auditDatabaseEnvAliases,
  auditSchema,
  type BaseConfig,
  baseConfigSchema,
  baseConfigShape,
  baseEnvAliases,
  checkSubjectIdentity,
  databaseEnvAliases,
  databaseShape,
  logLevels,
  machineClientShape,
  messagingEnvAliases,
  messagingShape,
  migrationShape,
  registrySchema,
  subjectIdentityShape,
  zBool,
  zInt,
  zList,
} from './config-schema.ts';
export { lockName } from './db/advisory-lock.ts';
export { arrayLiteral } from './db/array-literal.ts';
export { chainAuditTable, unchainAuditTable } from './db/audit-chain.ts';
export { type AuditRound, auditRound } from './db/audit-purge.ts';
export { createAuditTable, dropAuditTable } from './db/audit-table.ts';
export {
  type AuditChainTable,
  type AuditEntry,
  type AuditEventRow,
  type AuditEventsTable,
  type AuditOutcome,
  appendAudit,
  auditActor,
  auditChainHead,
  auditEventExists,
  listAudit,
  purgeAudit,
  setAuditRetention,
} from './db/audit-trail.ts';
export { type AuditChainCheck, verifyAuditChain } from './db/audit-verify.ts';
export { textArray, uuidArray } from './db/binary-array.ts';
export { callbackPool, PREPARED, PREPARED_SQL } from './db/callback-pool.ts';
export {
  type Database,
  type DatabaseSection,
  databaseOptions,
  type OpenDatabaseOptions,
  openDatabase,
} from './db/database.ts';
export { GroupCommit, type GroupCommitOptions, type GroupCommitStats } from './db/group-commit.ts';
export { cursorAt, newerThan, olderThan } from './db/keyset.ts';
export { boundedRead, countReadFailures, databaseGauge, metricReadFailed } from './db/metric-read.ts';
export { migrateToLatest, serviceMigrator } from './db/migrate.ts';
export {
  type RateLimitDatabase,
  type RateLimitExecutor,
  RateLimiter,
  type RateLimiterOptions,
  type RateLimitTable,
  type RateRule,
} from './db/rate-limiter.ts';
export { isLockConflict, isTransientDbError, type RetryOptions, withRetry } from './db/retry.ts';
export {
  auditTrailExposure,
  grantServiceRoles,
  type MigrationSection,
  migrateServiceDatabase,
  roleOf,
} from './db/roles.ts';
export { isDependencyDown } from './dependency-errors.ts';
export { DURATION_PATTERN, durationMs, parseDuration, zDuration, zDurationAtLeast } from './duration.ts';
export {
  AppError,
  type AppErrorOptions,
  ERROR_KINDS,
  type ErrorKind,
  errors,
  type FieldError,
  isAppError,
  isRefusal,
  type ProblemBody,
} from './errors.ts';
export { createFileOnce } from './files.ts';
export { GPU_MODELS, type GpuModel, gpuModelKey, spellModelKey } from './gpu-models.ts';
export { DEFAULT_BASE_RATES, DEFAULT_POWER_RATE_PER_WATT_HOUR, DEFAULT_VRAM_RATE_PER_GB_HOUR } from './gpu-rates.ts';
export { type App, accessVerifier, type CreateAppOptions, createApp } from './http/app.ts';
export { auditHook } from './http/audit-hook.ts';
export { auditTrailRoute } from './http/audit-route.ts';
export { onBodyCut } from './http/body-cut.ts';
export { ifMatchHeader, ifMatchHolds, sameEntityTag } from './http/conditions.ts';
export { PROBLEM_CONTENT_TYPE, sendProblem, toAppError } from './http/error-handler.ts';
export { listenForGateway } from './http/gateway-socket.ts';
export type { HealthCheck } from './http/health.ts';
export { inboxRoute } from './http/inbox.ts';
export { NEXT_CURSOR_HEADER, PAGE_LIMIT, pageQuery, queryInteger, setNextPage } from './http/paging.ts';
export { headersOf, kindOfStatus, problemOf, statusOf } from './http/problem.ts';
export { noBody, problemSchema } from './http/problem-schema.ts';
export { CORRELATION_ID_HEADER, forwardHeaders, REQUEST_ID_HEADER, saneId } from './http/request-context.ts';
export { ignoringUnknownFields, strictInput } from './http/strict-input.ts';
export { keepPinging, type Pingable } from './http/ws-liveness.ts';
export { isStorableJson } from './json-value.ts';
export { createLogger, type Logger, type LoggerSettings, serviceLogger, withRequestLogger } from './logger.ts';
export {
  GPUS_HELD_EVENT_KIND,
  PLATFORM_END_REASONS,
  type PlatformEndReason,
  PROVIDER_FAULT_END_REASONS,
  PROVIDER_STATUSES,
  type ProviderStatus,
  REGISTRY_MESSAGE_KINDS,
  SESSION_ENDED_EVENT_KINDS,
  SESSION_RUNNING_EVENT_KINDS,
  UNDELIVERED_END_REASONS,
  UNDELIVERING_STATUSES,
} from './market-terms.ts';
export {
  awaitStream,
  type ConnectPublisherOptions,
  connectPublisher,
  consumerPendingGauge,
  createNatsTrust,
  createOutboxTable,
  DAEMON_NATS_LIMITS,
  DAEMON_NATS_SUBJECTS,
  type DaemonNatsSubjects,
  type DurableConsumer,
  type DurableConsumerOptions,
  daemonInboxPrefix,
  daemonNatsPermissions,
  dropOutboxTable,
  type EnsureStreamOptions,
  type EventPublisher,
  ensureStream,
  eventBody,
  fileCredentials,
  isDaemonInbox,
  MessageBus,
  type MessageHandler,
  type MessageMeta,
  messageTraceContext,
  type NatsIssuer,
  type NatsPermissions,
  NatsPublisher,
  type NatsSetup,
  type NatsTrust,
  type NewEvent,
  NoopPublisher,
  natsConnectedGauge,
  natsPublicKeys,
  natsServerConfig,
  natsUserCreds,
  natsUserJwt,
  Outbox,
  type OutboxDatabase,
  type OutboxEventTable,
  OutboxRelay,
  type OutboxRelayOptions,
  onMessage,
  outboxMetrics,
  PLATFORM_NATS_USERS,
  type PublishOptions,
  parseNatsIssuer,
  parseNatsTrust,
  type RequestServer,
  type RequestServerOptions,
  type Settlement,
  serveRequests,
  serviceInboxPrefix,
  startBusConsumer,
  startDurableConsumer,
  subjectPrincipal,
  subjectSender,
  type TakenMessage,
  trustsSubjects,
  writeNatsSetup,
} from './messaging/index.ts';
export {
  BUCKET_NAME_PATTERN,
  bucketNameProblem,
  MAX_KEY_BYTES,
  OBJECT_KEY_PATTERN,
  objectKeyProblem,
  PREFIX_PATTERN,
  prefixProblem,
  zBucketName,
  zObjectKey,
} from './object-names.ts';
export type { HeaderName } from './openapi/components.ts';
export { durationWithin, maxSegmentUtf8Bytes, maxUtf8Bytes, SCHEMA_EXTENSIONS } from './openapi/extensions.ts';
export { PAGE_HEADERS, type RouteDocs, type SchemaRegistry, schemaRegistry } from './openapi/route-docs.ts';
export {
  afterCursor,
  type CursorValue,
  cursorPosition,
  decodeCursor,
  encodeCursor,
  invalidCursor,
  isUuid,
  type KeysetPosition,
  keysetPage,
  MAX_CURSOR_LENGTH,
  type Page,
  positionCursor,
} from './paging.ts';
export {
  type HourlyPrice,
  hourlyPrice,
  NEUTRAL_FACTOR,
  type PriceArithmetic,
  type PriceTerms,
  RATE_LOOKUP,
  sqlPriceArithmetic,
  UNPRICED_RATE,
} from './price-formula.ts';
export { buildRegistration, deregisterService, type Registration, registerService } from './registry/consul.ts';
export {
  type RunningService,
  type RunServiceOptions,
  runService,
  startOrExit,
  tuneGcForStreams,
} from './server/run-service.ts';
export {
  activeTraceContext,
  inSpanOf,
  type OpenSpan,
  startSpanOf,
  startTracing,
  type Tracing,
  traceFields,
  tracingConfigured,
  tracingOn,
} from './telemetry/tracing.ts';
export { EARLIEST_TIMESTAMP, isTimestampInRange, TIMESTAMP_LIMIT, TIMESTAMP_PATTERN, zTimestamp } from './timestamp.ts';
export {
  CHECKPOINT_DIR,
  inputPathOf,
  maxOutputPathBytes,
  NOTICE_FILE,
  refusedEnvName,
  settledOutput,
  WORKLOAD_FILES,
  WORKLOAD_LIMITS,
  type WorkloadInput,
  type WorkloadOutput,
  type WorkloadSpec,
  workloadSpecSchema,
} from './workload-spec.ts';
