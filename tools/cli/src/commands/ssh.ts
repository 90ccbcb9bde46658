/**
 * OpenSSH's own client into what you rent: `ssh-proxy <session>` (the `ProxyCommand`: the SSH transport over billing's
 * ssh stream, to the platform's SSH server, which lets in the keys of `gpu ssh-key add`) and `ssh-config` (a `Host`
 * per session for `~/.ssh/config`, and the platform's host key in a known_hosts file of the config directory), so
 * that `ssh`, `scp`, `rsync -e ssh` and editors' remote modes reach a workload as `gpu-<id>`.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { ApiError, unwrap } from '@gpu/client';
import type { Command } from 'commander';
import { type Context, context, ExitStatus, printJson, UsageError } from '../cli.ts';
import { configDir } from '../config.ts';
import { everyPage } from '../paging.ts';
import { bridge } from '../reach-stream.ts';
import {
  hostBlocks,
  knownHostsLine,
  markedBlock,
  readOrEmpty,
  replaceMarkedBlock,
  SESSION_ID,
  selfCommand,
  writeWhole,
} from '../ssh-config.ts';

/** `ssh`'s own exit status for a connection that failed: what a `ProxyCommand` that cannot connect exits with. */
const SSH_FAILED = 255;

/** A session's ID as ssh passes it (`%h`, the HostName), or as a host's name (`gpu-<id>`). */
function sessionIdOf(name: string): string {
  return name.replace(/^gpu-/, '');
}

/** One line for a stream that did not open: the problem's code and detail, as every refusal of `gpu`. */
function refusalLine(err: unknown, url: string): string {
  if (err instanceof ApiError) {
    const p = err.problem as { code?: string; detail?: string; title?: string };
    return `${p.code ?? err.status}: ${p.detail ?? p.title ?? 'refused'}`;
  }
  const code = (err as { code?: string }).code;
  return code ? `cannot reach ${url}: ${code}` : (err as Error).message;
}

/** Carries standard input and output over the session's ssh stream; the exit status for ssh. */
async function proxy(ctx: Context, sessionId: string): Promise<number> {
  const path = `/api/v1/billing/sessions/${encodeURIComponent(sessionId)}/ssh`;
  try {
    const end = await bridge(ctx, path, { input: process.stdin, output: process.stdout });
    if (end.code === 1000) return 0;
    process.stderr.write(`gpu: the SSH stream broke (${end.code}${end.reason ? `: ${end.reason}` : ''})\n`);
    return SSH_FAILED;
  } catch (err) {
    process.stderr.write(`gpu: ${refusalLine(err, ctx.url)}\n`);
    return SSH_FAILED;
  } finally {
    process.stdin.destroy();
  }
}

/** The caller's sessions that have a workload to reach (active or in their grace period), newest first. */
async function reachableSessions(ctx: Context): Promise<string[]> {
  const me = unwrap(await ctx.auth.GET('/api/v1/auth/me'));
  const sessions = await everyPage((cursor) =>
    ctx.billing.GET('/api/v1/billing/sessions', {
      params: { query: { status: ['running'], user_id: me.id, limit: 1000, ...(cursor ? { cursor } : {}) } },
    }),
  );
  const ids = sessions.filter((s) => s.user_id === me.id && s.workload !== false).map((s) => s.id);
  // The platform's answer goes into ~/.ssh/config: only what is a session ID.
  const sane = ids.filter((id) => SESSION_ID.test(id));
  const odd = ids.length - sane.length;
  if (odd > 0) process.stderr.write(`gpu: ${odd} session IDs the platform answered are no session IDs: left out\n`);
  return sane;
}

/**
 * The argv that runs this `gpu` again from ssh: the same program, the same platform (`--url`), and the same config
 * folder where it is not the default one (ssh runs it with its own environment).
 */
function gpuArgv(ctx: Context): string[] {
  const dir = path.resolve(configDir(ctx.env));
  const usual = path.join(homedir(), '.config', 'gpu');
  const self = selfCommand({ execPath: process.execPath, script: process.argv[1] ?? '', execArgv: process.execArgv });
  return [...(dir === usual ? [] : ['env', `GPU_CONFIG_DIR=${dir}`]), ...self, '--url', ctx.url];
}

/** Warns, on standard error, where the caller has no SSH key at the platform yet (nothing lets them in). */
async function warnWithoutKeys(ctx: Context): Promise<void> {
  const answer = await ctx.auth.GET('/api/v1/auth/ssh-keys', { params: { query: { limit: 1 } } }).catch(() => null);
  if (answer?.data?.length === 0) {
    process.stderr.write('gpu: you have no SSH key at the platform yet: add yours with gpu ssh-key add\n');
  }
}

interface SshConfigOptions {
  write?: boolean;
  identity?: string;
}

async function sshConfig(ctx: Context, given: string[], opts: SshConfigOptions) {
  for (const id of given.map(sessionIdOf)) {
    if (!SESSION_ID.test(id)) throw new UsageError(`${id} is not a session ID (gpu sessions lists yours)`);
  }
  if (opts.identity && !existsSync(opts.identity)) throw new UsageError(`${opts.identity} does not exist`);
  const ids = given.length > 0 ? given.map(sessionIdOf) : await reachableSessions(ctx);
  const hostKey = unwrap(await ctx.billing.GET('/api/v1/billing/reach/ssh-host-key'));
  const knownHosts = path.join(path.resolve(configDir(ctx.env)), 'known_hosts');
  writeWhole(knownHosts, knownHostsLine(hostKey.public_key), 0o600);
  const hosts = hostBlocks(ids, {
    gpu: gpuArgv(ctx),
    knownHosts,
    ...(opts.identity ? { identity: path.resolve(opts.identity) } : {}),
  });
  const sshConfigFile = path.join(homedir(), '.ssh', 'config');
  if (opts.write) {
    try {
      writeWhole(sshConfigFile, replaceMarkedBlock(readOrEmpty(sshConfigFile), markedBlock(hosts)), 0o600);
    } catch (err) {
      throw new Error(`cannot write ${sshConfigFile}: ${(err as Error).message}`);
    }
  }
  await warnWithoutKeys(ctx);
  const names = ids.map((id) => `gpu-${id.slice(0, 8)}`);
  if (ctx.json) {
    printJson({
      sessions: ids,
      host_key: hostKey,
      known_hosts: knownHosts,
      ssh_config: opts.write ? sshConfigFile : null,
      config: hosts,
    });
    return;
  }
  process.stderr.write(`gpu: the platform's host key ${hostKey.fingerprint} is in ${knownHosts}\n`);
  if (ids.length === 0) process.stderr.write('gpu: no session of yours has a workload running to reach\n');
  if (!opts.write) {
    process.stdout.write(hosts);
    return;
  }
  process.stdout.write(
    ids.length === 0
      ? `${sshConfigFile}: no hosts\n`
      : `${sshConfigFile}: ${names.join(', ')} (ssh ${names[0]}, scp file ${names[0]}:/work/)\n`,
  );
}

export function sshCommands(program: Command) {
  program
    .command('ssh-proxy <session-id>')
    .description(
      "OpenSSH's ProxyCommand (gpu ssh-config writes it): carries standard input and output to the platform's SSH " +
        'server for the session; exits 0 at the end, 255 when refused (the reason on standard error)',
    )
    .action(async (sessionId: string) => {
      const status = await proxy(context(program), sessionIdOf(sessionId));
      if (status !== 0) throw new ExitStatus(status);
    });

  program
    .command('ssh-config [session-id...]')
    .description(
      'OpenSSH hosts for your sessions (default: each of yours with a workload running), gpu-<first 8 of its ID> ' +
        "and gpu-<ID>, through gpu ssh-proxy; writes the platform's host key to known_hosts in the config folder " +
        'and prints the hosts, or with --write sets them into ~/.ssh/config',
    )
    .option('--write', 'set them into ~/.ssh/config, replacing those it set before')
    .option('--identity <file>', 'the private key ssh offers (and only it)')
    .action(async (ids: string[], opts: SshConfigOptions) => {
      await sshConfig(context(program), ids, opts);
    });
}
