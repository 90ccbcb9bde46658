/**
 * Outgoing mail over SMTP (nodemailer). A message is sent after the request that caused it has been answered, so an
 * answer takes as long whether or not mail went out (a reset for an unknown address looks like one for a known one),
 * and a slow mail server never holds a request. A message the server refused for now (or never answered) is tried
 * twice more (after 2 s and 10 s); one it refused for good (5xx) is not. What happened is logged with the user's ID
 * and the server's reply code, never the address, the server's words (they name it) or the text (it holds a code).
 * Closing stops the retries and waits for what is on its way, `CLOSE_WAIT_MS` at most.
 *
 * `smtp://` to another machine must upgrade to TLS (STARTTLS) before it logs in or sends, or nothing is sent: a
 * server that offers no STARTTLS, or a network that strips the offer, would otherwise see the credentials and the
 * codes in clear. `smtps://` is TLS from the start; the loopback (a local catcher) needs neither; a URL that says
 * `?requireTLS=false` (or `ignoreTLS=true`) decides for itself, for a mail catcher on a private network.
 */
import { durationMs, type Logger } from '@gpu/common';
import nodemailer from 'nodemailer';
import type { AuthConfig } from '../../config.ts';

interface Mail {
  to: string;
  subject: string;
  text: string;
  /** For the logs: whose mail it is, and what kind. */
  userId: string;
  kind: string;
}

export interface Mailer {
  /** Whether mail goes anywhere (`mail.smtp_url` is set). */
  readonly enabled: boolean;
  /** Sends in the background; never throws. */
  send(mail: Mail): void;
  /** Runs `work` after the current request, in the background (logged when it fails); close() waits for it. */
  later(what: string, work: () => Promise<void>): void;
  /** Waits for what is on its way. */
  idle(): Promise<void>;
  /** Waits for what is on its way, then closes the connections. */
  close(): Promise<void>;
}

const RETRY_DELAYS_MS = [2_000, 10_000];
/** The longest a closing service waits for mail on its way (within the shutdown timeout). */
const CLOSE_WAIT_MS = 5_000;

/** What of a send failure may be logged: nodemailer's errors carry the recipients and the server's words. */
function safeFailure(err: unknown): { code: string | null; response_code: number | null } {
  const e = err as { code?: unknown; responseCode?: unknown };
  return {
    code: typeof e.code === 'string' ? e.code : null,
    response_code: typeof e.responseCode === 'number' ? e.responseCode : null,
  };
}

/** This machine: `localhost`, 127.0.0.0/8, ::1. */
const isLoopback = (host: string) => host === 'localhost' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);

/** Whether mail to this URL must be sent over TLS that the service insists on (see above). */
export function mustRequireTls(smtpUrl: string): boolean {
  const url = new URL(smtpUrl);
  if (url.protocol !== 'smtp:' || isLoopback(url.hostname)) return false;
  return !url.searchParams.has('requireTLS') && !url.searchParams.has('ignoreTLS');
}

export function createMailer(config: AuthConfig['mail'], logger: Logger): Mailer {
  const timeout = durationMs(config.send_timeout);
  const transport = config.smtp_url
    ? nodemailer.createTransport({
        url: config.smtp_url,
        ...(mustRequireTls(config.smtp_url) ? { requireTLS: true } : {}),
        connectionTimeout: timeout,
        greetingTimeout: timeout,
        socketTimeout: timeout,
      })
    : null;
  const pending = new Set<Promise<void>>();
  let closing = false;
  const track = (p: Promise<void>) => {
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };
  const deliver = async (mail: Mail) => {
    const log = { user_id: mail.userId, mail: mail.kind };
    if (!transport) {
      logger.warn(log, 'mail not sent: no SMTP server is configured (mail.smtp_url)');
      return;
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const info = await transport.sendMail({
          from: config.from,
          to: mail.to,
          subject: mail.subject,
          text: mail.text,
        });
        logger.info({ ...log, message_id: info.messageId }, 'mail sent');
        return;
      } catch (err) {
        const failure = safeFailure(err);
        const permanent = failure.response_code !== null && failure.response_code >= 500;
        const delay = permanent || closing ? undefined : RETRY_DELAYS_MS[attempt];
        logger.warn(
          { ...log, ...failure, attempt: attempt + 1 },
          delay === undefined ? 'mail not sent' : 'mail failed; retrying',
        );
        if (delay === undefined) return;
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
      }
    }
  };
  return {
    enabled: transport !== null,
    send: (mail) => track(deliver(mail)),
    later(what, work) {
      track(
        new Promise<void>((resolve) => setImmediate(resolve))
          .then(work)
          .catch((err) => logger.error({ err }, `${what} failed`)),
      );
    },
    async idle() {
      while (pending.size > 0) await Promise.allSettled([...pending]);
    },
    async close() {
      closing = true;
      const waited = await Promise.race([
        this.idle().then(() => true),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), CLOSE_WAIT_MS).unref()),
      ]);
      if (!waited) logger.warn({ pending: pending.size }, 'mail still on its way at shutdown was given up');
      transport?.close();
    },
  };
}
