/**
 * NATS users in tests, against the tests' server in operator mode (test-env.sh): a provider daemon's, made as auth
 * makes one (`daemonNatsPermissions` signed with the trust's account), and waiting for a connection's status.
 */
import { readFileSync } from 'node:fs';
import { createUser } from '@nats-io/nkeys';
import { connect, jwtAuthenticator, type NatsConnection, type Status } from '@nats-io/transport-node';
import {
  DAEMON_NATS_LIMITS,
  DAEMON_NATS_SUBJECTS,
  type DaemonNatsSubjects,
  daemonInboxPrefix,
  daemonNatsPermissions,
  natsUserJwt,
  parseNatsIssuer,
} from '../messaging/nats-auth.ts';
import { testEnv } from './env.ts';

/** A connection as the daemon client `client` of `owner` would make with the user auth issues it. */
export async function connectAsDaemon(
  identity: { owner: string; client: string },
  subjects: Partial<DaemonNatsSubjects> = {},
): Promise<NatsConnection> {
  const key = createUser();
  const jwt = await natsUserJwt(
    parseNatsIssuer(readFileSync(testEnv.natsTrust, 'utf8')),
    'daemon',
    key.getPublicKey(),
    {
      permissions: daemonNatsPermissions(identity, { ...DAEMON_NATS_SUBJECTS, ...subjects }),
      expiresInSeconds: 300,
      limits: DAEMON_NATS_LIMITS,
    },
  );
  return connect({
    servers: testEnv.natsUrl,
    authenticator: jwtAuthenticator(jwt, key.getSeed()),
    inboxPrefix: daemonInboxPrefix(identity.client),
    maxReconnectAttempts: 0,
  });
}

/** Resolves with the first status of the connection that `match` accepts. */
export async function firstStatus(nc: NatsConnection, match: (s: Status) => boolean): Promise<Status> {
  for await (const s of nc.status()) if (match(s)) return s;
  throw new Error('the connection closed before the status came');
}
