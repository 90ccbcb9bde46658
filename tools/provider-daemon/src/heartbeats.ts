/**
 * Heartbeats over NATS: with `nats_url`, the daemon sends each heartbeat as a request on
 * `<heartbeat_subject>.<provider ID>` (core NATS, its token in an `Authorization` header), which a registry instance
 * applies like HTTP's and answers with the result (`status_code`, the status or the problem). A request NATS cannot
 * deliver (no registry instance listening, no answer in time, the connection down) comes back undefined, and the
 * daemon sends that heartbeat over HTTP.
 */
import type { TokenSource } from '@gpu/client';
import type { Logger } from '@gpu/common';
import { headers, type NatsConnection } from '@nats-io/transport-node';

/** The registry's answer to a heartbeat (one result of its POST /providers/heartbeats). */
interface HeartbeatAnswer {
  status_code: number;
  problem?: { code?: string; detail?: string };
}

export interface HeartbeatChannel {
  /** Sends one heartbeat; its answer, or undefined when NATS could not deliver it (send it over HTTP). */
  send(providerId: string, body: object): Promise<HeartbeatAnswer | undefined>;
}

export function natsHeartbeats(opts: {
  connection: NatsConnection;
  subject: string;
  token: TokenSource;
  timeoutMs: number;
  logger: Logger;
}): HeartbeatChannel {
  return {
    async send(providerId, body) {
      const h = headers();
      h.set('Authorization', `Bearer ${await opts.token.get()}`);
      try {
        const answer = await opts.connection.request(`${opts.subject}.${providerId}`, JSON.stringify(body), {
          headers: h,
          timeout: opts.timeoutMs,
        });
        return answer.json<HeartbeatAnswer>();
      } catch (err) {
        opts.logger.debug({ err: (err as Error).message }, 'heartbeat over NATS not delivered; sending it over HTTP');
        return undefined;
      }
    },
  };
}
