/**
 * Which processes hold a TCP port of this machine, for `pnpm start` to name them when it refuses a port in use: the
 * listening sockets on that port in /proc/net/tcp and /proc/net/tcp6 (any address: one on 0.0.0.0 or :: blocks
 * every address), matched by socket inode with the descriptors of every process (/proc/<pid>/fd/* links read
 * `socket:[<inode>]`). Linux only; a port whose holder cannot be read (no /proc, or another user's process) has none.
 *
 *   describeHolders(portHolders(8000))   // 'pid 4242 (node ... services/auth/dist/src/server.js)', 'an unknown process'
 */
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from './platform.ts';

export interface PortHolder {
  pid: number;
  /** Its command line, shortened: the program's file name and the arguments after it. */
  command: string;
}

/** TCP_LISTEN in /proc/net/tcp's `st` column. */
const LISTEN = '0A';

/** The inodes of the sockets listening on `port` (any address, IPv4 and IPv6). */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
      const fields = line.trim().split(/\s+/);
      const local = fields[1];
      if (!local || fields[3] !== LISTEN) continue;
      if (Number.parseInt(local.slice(local.lastIndexOf(':') + 1), 16) !== port) continue;
      const inode = fields[9];
      if (inode && inode !== '0') inodes.add(inode);
    }
  }
  return inodes;
}

/**
 * A process's command line (its argv, as /proc/<pid>/cmdline holds it), shortened to one line: the program's file
 * name and its arguments, paths inside this checkout relative to it (`services/auth/dist/src/server.js`). A program
 * that rewrote its title (nginx: `nginx: master process /usr/sbin/nginx -c /data/gateway/nginx.conf`, one string
 * with spaces) leaves a single argument: only its first word is a program's path, so only that is shortened.
 */
export function shortCommand(argv: readonly string[]): string {
  let [program = '', ...args] = argv.filter(Boolean);
  if (args.length === 0 && /\s/.test(program.trim()) && !existsSync(program)) {
    [program = '', ...args] = program.trim().split(/\s+/);
  }
  const line = [path.basename(program), ...args]
    .join(' ')
    .replaceAll(`file://${repoRoot}`, '')
    .replaceAll(repoRoot, '');
  return line.length > 240 ? `${line.slice(0, 239)}…` : line;
}

/** A process's command line, shortened (`shortCommand`); `?` when it cannot be read. */
function commandOf(pid: number): string {
  try {
    return shortCommand(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0'));
  } catch {
    return '?';
  }
}

/** The processes holding `port` (listening on it), found as the file comment says; none when it cannot be told. */
export function portHolders(port: number): PortHolder[] {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return [];
  const sockets = new Set([...inodes].map((inode) => `socket:[${inode}]`));
  const holders: PortHolder[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry));
  } catch {
    return holders;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // Gone, or another user's.
    }
    const holds = fds.some((fd) => {
      try {
        return sockets.has(readlinkSync(`/proc/${pid}/fd/${fd}`));
      } catch {
        return false;
      }
    });
    if (holds) holders.push({ pid: Number(pid), command: commandOf(Number(pid)) });
  }
  return holders;
}

/** Who holds a port, in words: `pid 4242 (node ...)`, several joined with "and", or "an unknown process". */
export function describeHolders(holders: readonly PortHolder[]): string {
  if (holders.length === 0) return 'an unknown process';
  return holders.map((h) => `pid ${h.pid} (${h.command})`).join(' and ');
}
