/**
 * What `gpu ssh-config` writes for OpenSSH: a `Host` block per session whose `ProxyCommand` is this same `gpu`
 * (`ssh-proxy %h`), the platform's host key in a known_hosts file of the config directory under the alias
 * `gpu-platform`, and the block set into `~/.ssh/config` between two marker lines, replaced whole each time.
 */
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The name the platform's host key is known by, for every session (`HostKeyAlias`). */
const HOST_KEY_ALIAS = 'gpu-platform';
/** A session's ID, the only text of the platform's that goes into a `Host` block. */
export const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** The platform's SSH host key as a known_hosts line takes it: a type and base64, nothing more. */
const HOST_KEY = /^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/]+={0,2}$/;

/**
 * The known_hosts line of the platform's host key, as billing answered it; throws for anything but one key (a
 * platform's answer is written into a file ssh trusts: a second line, or an option, would be taken as ssh's own).
 */
export function knownHostsLine(publicKey: string): string {
  const key = publicKey.trim();
  if (!HOST_KEY.test(key))
    throw new Error('the platform answered an SSH host key that is not one key: nothing written');
  return `${HOST_KEY_ALIAS} ${key}\n`;
}
/** The user ssh asks for: the platform's SSH server takes any, and lands in the workload as its own user. */
const SSH_USER = 'workload';
const BEGIN_PREFIX = '# >>> gpu ssh-config >>>';
export const BEGIN_MARKER = `${BEGIN_PREFIX} (written by \`gpu ssh-config --write\`; replaced whole each time)`;
export const END_MARKER = '# <<< gpu ssh-config <<<';

/** The package's own bin: what runs `gpu` from its TypeScript (a checkout, or the package installed as it is). */
const PACKAGE_BIN = fileURLToPath(new URL('../bin/gpu.mjs', import.meta.url));

/** A word for the shell that runs a `ProxyCommand` (`$SHELL -c "exec ..."`): quoted when it needs to be. */
export function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** A value of ssh_config: quoted when it holds a blank or a quote. */
function configValue(value: string): string {
  return /[\s"]/.test(value) ? `"${value.replace(/"/g, '\\"')}"` : value;
}

/** ssh expands `%` tokens in ProxyCommand, IdentityFile and UserKnownHostsFile: a literal one is written `%%`. */
function literal(text: string): string {
  return text.replace(/%/g, '%%');
}

/**
 * The argv that runs this same `gpu` again, from how this run was started (`process.execPath`, `process.argv[1]`,
 * `process.execArgv`): TypeScript run through a loader (`pnpm gpu`, `node --import tsx .../main.ts`) becomes the
 * package's bin, which registers tsx itself; a script that plain node runs (the bin, an installed `gpu`, compiled
 * JavaScript) is run again as it is.
 */
export function selfCommand(
  run: { execPath: string; script: string; execArgv: string[] },
  packageBin: string = PACKAGE_BIN,
): string[] {
  const script = path.resolve(run.script);
  if (!/\.[cm]?tsx?$/.test(script)) return [run.execPath, script];
  if (existsSync(packageBin)) return [run.execPath, packageBin];
  return [run.execPath, ...run.execArgv, script];
}

export interface HostOptions {
  /** The argv that runs `gpu` (its global options included), `ssh-proxy %h` added after it. */
  gpu: string[];
  /** The known_hosts file holding the platform's host key. */
  knownHosts: string;
  /** A private key for ssh to offer (and only it). */
  identity?: string;
}

/** The OpenSSH `Host` blocks of `sessionIds`: `gpu-<first 8 characters>` (unless two share them) and `gpu-<id>`. */
export function hostBlocks(sessionIds: string[], opts: HostOptions): string {
  // Written into ~/.ssh/config: anything but a session ID (a line break, a space, a `*`) would be ssh's own words.
  for (const id of sessionIds) {
    if (!SESSION_ID.test(id)) throw new Error(`${JSON.stringify(id)} is not a session ID: nothing written`);
  }
  const short = (id: string) => id.slice(0, 8);
  const shared = new Set(sessionIds.filter((id, i) => sessionIds.some((o, j) => j !== i && short(o) === short(id))));
  const proxy = [...opts.gpu, 'ssh-proxy'].map(shellWord).map(literal).concat('%h').join(' ');
  return sessionIds
    .map((id) => {
      const names = shared.has(id) || short(id) === id ? [`gpu-${id}`] : [`gpu-${short(id)}`, `gpu-${id}`];
      const lines = [
        `Host ${names.join(' ')}`,
        `  HostName ${id}`,
        `  User ${SSH_USER}`,
        `  ProxyCommand ${proxy}`,
        `  HostKeyAlias ${HOST_KEY_ALIAS}`,
        `  UserKnownHostsFile ${configValue(literal(opts.knownHosts))}`,
        '  StrictHostKeyChecking yes',
      ];
      if (opts.identity) lines.push(`  IdentityFile ${configValue(literal(opts.identity))}`, '  IdentitiesOnly yes');
      return `${lines.join('\n')}\n`;
    })
    .join('\n');
}

/** The marked block around `hosts`. */
export function markedBlock(hosts: string): string {
  return `${BEGIN_MARKER}\n${hosts}${hosts && !hosts.endsWith('\n') ? '\n' : ''}${END_MARKER}\n`;
}

/**
 * `config` with its marked block replaced by `block` where it has one (what comes before and after kept as it is),
 * else with `block` added at its end: after everything the file says, so that a `Host` or `Match` block of its own
 * is never cut short (ssh takes each option's first value: a `Host *` above sets what the block leaves unset).
 */
export function replaceMarkedBlock(config: string, block: string): string {
  const lines = config.split('\n');
  const begin = lines.findIndex((l) => l.startsWith(BEGIN_PREFIX));
  if (begin === -1) {
    if (config === '') return block;
    return `${config}${config.endsWith('\n') ? '' : '\n'}\n${block}`;
  }
  const end = lines.findIndex((l, i) => i > begin && l.trim() === END_MARKER);
  if (end === -1) {
    throw new Error(`it has the line "${lines[begin]}" but not "${END_MARKER}" after it: mend it by hand`);
  }
  const after = lines.slice(end + 1).join('\n');
  return `${lines.slice(0, begin).join('\n')}${begin > 0 ? '\n' : ''}${block}${after}`;
}

/**
 * Writes `text` to `file` through a file of its own renamed over it (a reader sees the old file or the new one), with
 * its mode kept (`mode` for a new one) and its folder made 0700 where missing. A symbolic link (a dotfiles manager's)
 * stays one: the file it names is written.
 */
export function writeWhole(file: string, text: string, mode: number): void {
  const target = existsSync(file) ? realpathSync(file) : file;
  mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
  const keep = existsSync(target) ? statSync(target).mode & 0o777 : mode;
  const tmp = `${target}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: keep });
  chmodSync(tmp, keep);
  renameSync(tmp, target);
}

/** The text of `file`, or '' when there is none. */
export function readOrEmpty(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return '';
    throw err;
  }
}
