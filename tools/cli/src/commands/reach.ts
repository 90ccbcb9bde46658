/**
 * Reaching a rented workload: `exec` (a program in it, its standard streams passed through, its exit code the
 * command's) and `shell` (an interactive terminal in it). Both open billing's exec stream, a WebSocket speaking
 * Kubernetes' exec channels (`v5.channel.k8s.io`), through the platform: the machine opens no port. Its ports
 * (`port-forward`) and OpenSSH (`ssh-proxy`, `ssh-config`) have files of their own.
 */
import type { Command } from 'commander';
import WebSocket from 'ws';
import { type Context, context, ExitStatus, UsageError } from '../cli.ts';
import { reachSocket, whenOpen } from '../reach-stream.ts';
import { openCommands, portForwardCommands } from './port-forward.ts';
import { sshCommands } from './ssh.ts';

const PROTOCOL = 'v5.channel.k8s.io';
const [STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE] = [0, 1, 2, 3, 4, 255];

/** The default shell: bash where the workload has it, else sh. */
const SHELL = ['/bin/sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi'];

/** The exit status a Kubernetes `Status` says (255 for a stream that ended otherwise, as ssh does). */
export function statusCode(status: { status?: string; reason?: string; message?: string; details?: unknown }): number {
  if (status.status === 'Success') return 0;
  const causes = (status.details as { causes?: { reason?: string; message?: string }[] } | undefined)?.causes ?? [];
  const code = Number(causes.find((c) => c.reason === 'ExitCode')?.message);
  if (status.reason === 'NonZeroExitCode' && Number.isInteger(code)) return code;
  return 255;
}

/** Runs `argv` in the session's workload, with or without a terminal; resolves to its exit status. */
export async function execStream(ctx: Context, sessionId: string, argv: string[], tty: boolean): Promise<number> {
  const query = new URLSearchParams();
  for (const a of argv) query.append('command', a);
  query.set('tty', String(tty));
  if (tty) {
    query.set('cols', String(process.stdout.columns || 80));
    query.set('rows', String(process.stdout.rows || 24));
  }
  const ws = await reachSocket(ctx, `/api/v1/billing/sessions/${encodeURIComponent(sessionId)}/exec?${query}`, {
    protocols: [PROTOCOL],
  });
  // Listening from the first moment: the program's first output (or its end) may come with the upgrade's answer.
  const closed = new Promise<[number, string]>((resolve) => ws.once('close', (c, r) => resolve([c, String(r)])));
  let status: Record<string, unknown> | null = null;
  ws.on('message', (data: Buffer) => {
    const channel = data[0];
    const body = data.subarray(1);
    if (channel === STDOUT) process.stdout.write(body);
    else if (channel === STDERR) process.stderr.write(body);
    else if (channel === STATUS) {
      try {
        status = JSON.parse(String(body)) as Record<string, unknown>;
      } catch {
        status = { status: 'Failure', message: String(body) };
      }
    }
  });
  await whenOpen(ws);

  const stdin = process.stdin;
  const raw = tty && stdin.isTTY;
  if (raw) stdin.setRawMode(true);
  const send = (channel: number, data: Buffer) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(Buffer.concat([Buffer.of(channel), data]));
  };
  const onInput = (chunk: Buffer) => send(STDIN, chunk);
  const onEnd = () => send(CLOSE, Buffer.of(STDIN));
  const onResize = () =>
    send(RESIZE, Buffer.from(JSON.stringify({ Width: process.stdout.columns, Height: process.stdout.rows })));
  stdin.on('data', onInput);
  stdin.on('end', onEnd);
  if (tty) process.stdout.on('resize', onResize);

  const [code, reason] = await closed;
  stdin.off('data', onInput);
  stdin.off('end', onEnd);
  process.stdout.off('resize', onResize);
  if (raw) stdin.setRawMode(false);
  stdin.pause();
  const end = status as Record<string, unknown> | null;
  if (!end) {
    process.stderr.write(`gpu: the stream closed (${code}${reason ? `: ${reason}` : ''})\n`);
    return 255;
  }
  const exit = statusCode(end);
  if (exit === 255 && end.message) process.stderr.write(`gpu: ${String(end.message)}\n`);
  return exit;
}

export function reachCommands(program: Command) {
  program
    .command('exec <session-id>')
    .argument('<command...>', 'the program and its arguments, after --')
    .description(
      "run a program in a rented session's running workload (its files, GPUs, user and variables): its standard " +
        "input, output and error passed through, its exit code this command's",
    )
    .option('-t, --tty', 'give it a terminal (an interactive program)')
    .action(async (sessionId: string, argv: string[], opts: { tty?: boolean }) => {
      if (argv.length === 0) throw new UsageError('exec needs a program after --');
      const status = await execStream(context(program), sessionId, argv, opts.tty === true);
      if (status !== 0) throw new ExitStatus(status);
    });

  program
    .command('shell <session-id>')
    .description(
      "an interactive shell in a rented session's running workload (bash where it has one, else sh); exits with the " +
        "shell's status",
    )
    .action(async (sessionId: string) => {
      if (!process.stdin.isTTY) throw new UsageError('shell needs a terminal; use `gpu exec` from scripts');
      const status = await execStream(context(program), sessionId, SHELL, true);
      if (status !== 0) throw new ExitStatus(status);
    });

  portForwardCommands(program);
  openCommands(program);
  sshCommands(program);
}
