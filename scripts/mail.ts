/**
 * `pnpm mail`: the last messages `pnpm start`'s mail server caught (the platform sends no mail out of the machine
 * under pnpm start): address verifications and password resets, with their codes.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { readCaughtMail } from './lib/mail-catcher.ts';
import { answerHelp } from './lib/usage.ts';

answerHelp(`usage: pnpm mail [--last N] [--to ADDRESS] [--json]

Prints the last messages (3 by default) that pnpm start's mail server caught, the newest last: what the platform
mailed (address verification and password-reset codes). --to keeps those to one address. The messages are files in
<data folder>/mail (PLATFORM_DATA_DIR, default .data).`);

const { values } = parseArgs({
  options: {
    last: { type: 'string', default: '3' },
    to: { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
const last = Number(values.last);
if (!Number.isInteger(last) || last < 1) {
  process.stderr.write('pnpm mail: --last takes a whole number of at least 1\n');
  process.exit(2);
}
const dir = path.join(process.env.PLATFORM_DATA_DIR || '.data', 'mail');
const to = values.to?.toLowerCase();
const all = await readCaughtMail(dir);
const messages = (to ? all.filter((m) => m.to.toLowerCase().includes(to)) : all).slice(-last);
if (values.json) {
  process.stdout.write(`${JSON.stringify(messages, null, 2)}\n`);
} else if (messages.length === 0) {
  process.stdout.write(`no mail in ${dir}${to ? ` to ${to}` : ''}\n`);
} else {
  for (const m of messages) {
    process.stdout.write(
      `--- ${m.date}\nFrom: ${m.from}\nTo: ${m.to}\nSubject: ${m.subject}\n\n${m.text.trimEnd()}\n\n`,
    );
  }
}
