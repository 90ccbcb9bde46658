/**
 * Heartbeats over NATS: with `nats_url`, the daemon sends each heartbeat on `<heartbeat_subject>.<provider ID>` (core
 * NATS, its token in an `Authorization` header), which a registry instance applies like HTTP's; with a NATS user of
 * its own (nats-user.ts), on `<heartbeat_subject>.<owner>.<client>.<provider ID>` and with no token: the server lets
 * it publish there alone, so the subject says who sent it. Sent as a request
 * (`answer: true`), it is answered with the result (`status_code`, the status or the problem); published (`answer:
 * false`), it is applied and answered by nobody: an answer costs the registry, NATS and the daemon about as much as
 * the heartbeat, and the daemon asks for one only where it needs it (daemon.ts, `answer_every`). A request NATS
 * cannot deliver (no registry instance listening, the connection down) comes back undefined, and the daemon sends that
 * heartbeat over HTTP (logged as a warning the first time and every 100th, so a wrong subject shows); so does a
 * publication the connection cannot take. While the connection is lost (`live` false: the client reconnecting) nothing
 * is handed to NATS, whose client would hold a publication in its buffer and a request until its timeout: the
 * heartbeat goes over HTTP at once, and so does one whose request timed out as the connection went. A request that
 * reached a registry but got no answer in time throws: the daemon backs off and beats again, rather than sending it
 * twice to a registry that is behind.
 */
import type { TokenSource } from '@gpu/client';
import type { Logger } from '@gpu/common';
import { headers, type NatsConnection, TimeoutError } from '@nats-io/transport-node';

/** The registry's answer to a heartbeat (one result of its POST /providers/heartbeats). */
interface HeartbeatAnswer {
  status_code: number;
  problem?: { code?: string; detail?: string };
}

export interface HeartbeatChannel {
  /**
   * Sends one heartbeat: with `answer`, its answer; without, `'published'` (handed to NATS, answered by nobody).
   * Undefined when NATS could not take or deliver it (send it over HTTP).
   */
  send(providerId: string, body: object, answer: boolean): Promise<HeartbeatAnswer | 'published' | undefined>;
}

export function natsHeartbeats(opts: {
  connection: NatsConnection;
  subject: string;
  token: TokenSource;
  /** The daemon's own NATS user's owner and client: subjects name them, and no token goes with a heartbeat. */
  identity?: { owner: string; client: string };
  timeoutMs: number;
  /** Whether the connection is up now (the publisher's `connected`); absent: taken as up. */
  live?: () => boolean;
  logger: Logger;
}): HeartbeatChannel {
  let fallbacks = 0;
  const live = opts.live ?? (() => true);
  const overHttp = (why: string) => {
    if (fallbacks++ % 100 === 0) {
      opts.logger.warn(
        { err: why, subject: opts.subject, times: fallbacks },
        'heartbeat over NATS not delivered; sending it over HTTP',
      );
    }
    return undefined;
  };
  const prefix = opts.identity ? `${opts.subject}.${opts.identity.owner}.${opts.identity.client}` : opts.subject;
  return {
    async send(providerId, body, answer) {
      const h = opts.identity ? undefined : headers();
      h?.set('Authorization', `Bearer ${await opts.token.get()}`);
      const subject = `${prefix}.${providerId}`;
      if (!live()) return overHttp('the NATS connection is lost (reconnecting)');
      try {
        if (!answer) {
          opts.connection.publish(subject, JSON.stringify(body), h ? { headers: h } : {});
          return 'published';
        }
        const answered = await opts.connection.request(subject, JSON.stringify(body), {
          ...(h ? { headers: h } : {}),
          timeout: opts.timeoutMs,
        });
        return answered.json<HeartbeatAnswer>();
      } catch (err) {
        const timedOut = err instanceof TimeoutError || (err as Error).cause instanceof TimeoutError;
        if (timedOut && live()) {
          throw new Error(`the registry did not answer the heartbeat over NATS within ${opts.timeoutMs} ms`);
        }
        return overHttp((err as Error).message);
      }
    },
  };
}
