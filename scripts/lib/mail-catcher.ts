/**
 * A mail catcher: a real SMTP server (smtp-server, nodemailer's) that keeps every message it is given as an `.eml`
 * file in a folder, instead of passing it on. `pnpm start`'s embedded mail server (scripts/dev/mail-server.ts), read
 * with `pnpm mail`; the tests' too, which read what auth mailed.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';

/** The largest message kept (bigger ones are refused with SMTP's 552). */
const MAX_MESSAGE_BYTES = 10 * 1024 * 1024;

export interface CaughtMail {
  file: string;
  date: string;
  from: string;
  to: string;
  subject: string;
  text: string;
}

export interface MailCatcher {
  port: number;
  /** `smtp://host:port`: what a service's SMTP_URL is set to. */
  url: string;
  close(): Promise<void>;
}

/** Starts the catcher on `port` (0: any free one), keeping messages in `dir`. */
export async function startMailCatcher(opts: { dir: string; host?: string; port?: number }): Promise<MailCatcher> {
  mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
  let seq = 0;
  const server = new SMTPServer({
    // Local only and for development: no TLS, any sender, no sign-in.
    secure: false,
    disabledCommands: ['STARTTLS', 'AUTH'],
    authOptional: true,
    size: MAX_MESSAGE_BYTES,
    logger: false,
    onData(stream, _session, done) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if ((stream as unknown as { sizeExceeded?: boolean }).sizeExceeded) {
          done(Object.assign(new Error('message too big'), { responseCode: 552 }));
          return;
        }
        const name = `${new Date().toISOString().replaceAll(':', '-')}-${String(++seq).padStart(6, '0')}.eml`;
        writeFileSync(path.join(opts.dir, name), Buffer.concat(chunks), { mode: 0o600 });
        done();
      });
    },
  });
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;
  return {
    port,
    url: `smtp://${host}:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The messages kept in `dir`, the oldest first (at most the `last` newest). */
export async function readCaughtMail(dir: string, last = Number.POSITIVE_INFINITY): Promise<CaughtMail[]> {
  let names: string[];
  try {
    names = readdirSync(dir)
      .filter((n) => n.endsWith('.eml'))
      .sort();
  } catch {
    return [];
  }
  const out: CaughtMail[] = [];
  for (const name of names.slice(Math.max(0, names.length - last))) {
    const file = path.join(dir, name);
    const parsed = await simpleParser(readFileSync(file));
    const addresses = (a: typeof parsed.to) =>
      [a ?? []]
        .flat()
        .map((x) => x.text)
        .join(', ');
    out.push({
      file,
      date: (parsed.date ?? new Date(0)).toISOString(),
      from: addresses(parsed.from),
      to: addresses(parsed.to),
      subject: parsed.subject ?? '',
      text: parsed.text ?? '',
    });
  }
  return out;
}
