/** What the mail catcher of a test caught, read as a person reads their mailbox. */
import { readCaughtMail } from '../../../scripts/lib/mail-catcher.ts';

export const VERIFY = 'Verify your e-mail address';
export const RESET = 'Reset your password';

/** The mails caught in `dir`: those to an address, the `n`th of a subject (waited for), and the code in it. */
export function mailbox(dir: string) {
  const mailTo = async (to: string) => (await readCaughtMail(dir)).filter((m) => m.to === to);
  /** Waits for the `n`th mail to `to` with `subject` (30 s at most: a failed send is tried again in 2 s, then 10 s). */
  async function mailed(to: string, subject: string, n = 1) {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const mails = (await mailTo(to)).filter((m) => m.subject === subject);
      if (mails.length >= n) return mails[n - 1]!;
      if (Date.now() > deadline) throw new Error(`no mail "${subject}" to ${to}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  /** The code in the `n`th mail to `to` with `subject`. */
  async function codeFrom(to: string, subject: string, n = 1): Promise<string> {
    const { text } = await mailed(to, subject, n);
    const code = /Your code:\s+(\S+)/.exec(text)?.[1];
    if (!code) throw new Error(`no code in: ${text}`);
    return code;
  }
  return { mailTo, mailed, codeFrom };
}
