/**
 * `pnpm start`'s embedded mail server: an SMTP server that keeps every message as a file in a folder (nothing is
 * passed on), so the platform's mails (address verification, password resets) can be read with `pnpm mail`.
 * Usage: tsx scripts/dev/mail-server.ts [--port 1025] [--host 127.0.0.1] [--dir .data/mail]
 */
import { parseArgs } from 'node:util';
import { startMailCatcher } from '../lib/mail-catcher.ts';
import { answerHelp } from '../lib/usage.ts';

answerHelp(`usage: node --import tsx scripts/dev/mail-server.ts [--port 1025] [--host 127.0.0.1] [--dir .data/mail]

An SMTP server that keeps every message it is given as an .eml file in --dir and passes nothing on: pnpm start's
mail server. Read the messages with pnpm mail.`);

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '1025' },
    host: { type: 'string', default: '127.0.0.1' },
    dir: { type: 'string', default: '.data/mail' },
  },
});
const catcher = await startMailCatcher({ dir: values.dir, host: values.host, port: Number(values.port) });
process.stdout.write(`mail catcher listening on ${catcher.url} (messages in ${values.dir})\n`);
const stop = async () => {
  await catcher.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
