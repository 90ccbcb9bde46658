/**
 * A daemon that is not root reaches its workloads as a root daemon does (`gpu exec`, `gpu shell`, forwarded ports):
 * the daemon's side runs as an unprivileged user (support/unprivileged-reach.ts, started by this test as `nobody`),
 * against the real bubblewrap, nsenter and Perl. What it saw is checked here: the program entered runs in every one of
 * the workload's namespaces, as the workload's user and groups, with no capability and nothing of the daemon's (a
 * checkpoint is packed that way too); the
 * forwarder reaches the workload's loopback and never the machine's; a workload with the network gets its way out,
 * fenced from the machine's network as a root daemon's is.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const NOBODY = 65534;
const packageDir = fileURLToPath(new URL('..', import.meta.url));
const helper = path.join(packageDir, 'test', 'support', 'unprivileged-reach.ts');

/** Why it cannot run here, or null: it switches to another user, who must be able to run this checkout's node. */
function unavailable(): string | null {
  if (process.getuid?.() !== 0) return 'needs root, to run the daemon as another user';
  const check = spawnSync('test', ['-x', process.execPath, '-a', '-r', helper], { uid: NOBODY, gid: NOBODY });
  return check.status === 0 ? null : `user ${NOBODY} cannot run ${process.execPath} or read ${helper}`;
}
const why = unavailable();

const tmp = mkdtempSync(path.join(tmpdir(), 'unprivileged-reach-test-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Report {
  workload: { ns: Record<string, string>; groups: string };
  daemon: { ns: Record<string, string>; uid: number };
  entered: { code: number; signal: string | null; out: string; err: string };
  terminal: { end: { code: number; signal: string | null }; screen: string };
  checkpoint: string;
  forward: {
    answer: string;
    forwarder?: { net: string; uids: string; capabilities: string[]; noNewPrivs: string };
  };
  machinePort: string;
  machineAccepted: number;
  network: string;
  afterEnd: string;
}

/** Runs the daemon's side as `nobody`; what it saw. */
async function asNobody(): Promise<Report> {
  chownSync(tmp, NOBODY, NOBODY);
  const child = spawn(process.execPath, ['--import', 'tsx', helper], {
    cwd: packageDir,
    uid: NOBODY,
    gid: NOBODY,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: tmp, TMPDIR: tmp },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d;
  });
  child.stderr.on('data', (d: Buffer) => {
    err += d;
  });
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  if (code !== 0) throw new Error(`the unprivileged daemon's side exited with ${code}: ${err}`);
  return JSON.parse(out.trim().split('\n').at(-1)!) as Report;
}

describe('a daemon that is not root', () => {
  it.skipIf(why !== null)(
    `enters its workload and forwards its ports as a root daemon does${why ? ` (skipped: ${why})` : ''}`,
    async () => {
      const r = await asNobody();
      expect(r.daemon.uid).toBe(NOBODY);
      // The program: the workload's view, user, variables, input and exit code.
      expect(r.entered.err).toBe('');
      expect(r.entered.code).toBe(7);
      const lines = r.entered.out.split('\n');
      expect(lines.slice(0, 3)).toEqual([
        `uid=${NOBODY} host=workload pwd=/work token=tok-7c1e`,
        'from stdin',
        'notes.txt',
      ]);
      // Every namespace the workload's own program has (none of the daemon's).
      for (const [name, inode] of Object.entries(r.workload.ns)) {
        expect(lines).toContain(`ns ${name} ${inode}`);
        expect(inode).not.toBe(r.daemon.ns[name]);
      }
      const field = (name: string) =>
        lines
          .find((l) => l.startsWith(`${name}:`))
          ?.split(':')[1]
          ?.trim();
      expect(field('Groups')).toBe(r.workload.groups);
      for (const set of ['CapPrm', 'CapEff', 'CapInh', 'CapAmb']) expect(field(set)).toBe('0000000000000000');
      expect(field('NoNewPrivs')).toBe('1');
      // No descriptor of the daemon's: not the namespaces it entered through (4, 5), nor the variables' file (3 is
      // `ls`'s own directory).
      const fds = lines
        .find((l) => l.startsWith('fds '))!
        .slice(4)
        .trim()
        .split(' ');
      expect(fds).not.toContain('4');
      expect(fds).not.toContain('5');
      // The sandbox's processes alone (the machine runs hundreds), not the daemon's files, no user namespace.
      expect(Number(lines.find((l) => l.startsWith('procs '))!.slice(6))).toBeLessThan(10);
      expect(lines).toContain('no daemon file');
      expect(lines).toContain('no user namespace');
      // A terminal: its size, and its shell's exit status.
      expect(r.terminal.screen).toMatch(/33 101/);
      expect(r.terminal.end).toEqual({ code: 3, signal: null });
      // A job's checkpoint, packed from inside the running workload.
      expect(r.checkpoint).toBe('step-7\n');
      // A forwarded port: the workload's server, through a forwarder in its network namespace, as the daemon's
      // user with no capability (root of the sandbox's owning user namespace, where bubblewrap set it up, it is not).
      expect(r.forward.answer).toMatch(/^HTTP\/1\.0 200/);
      expect(r.forward.answer.endsWith('\r\n\r\nhello from inside\n')).toBe(true);
      expect(r.forward.forwarder).toEqual({
        net: r.workload.ns.net,
        uids: [NOBODY, NOBODY, NOBODY, NOBODY].join('\t'),
        capabilities: Array(4).fill('0000000000000000'),
        noNewPrivs: '1',
      });
      // The machine's own loopback is not the workload's.
      expect(r.machinePort).toBe('refused');
      expect(r.machineAccepted).toBe(0);
      // A workload with the network: a way out through slirp4netns, fenced as a root daemon fences it (the private
      // and link-local ranges and each of the machine's own addresses routed to nowhere, its loopback kept out).
      const own = Object.values(networkInterfaces())
        .flat()
        .filter((a) => a && a.family === 'IPv4' && !a.internal).length;
      const network = r.network.split('\n');
      expect(network[0]).toMatch(/^lan (none)?unreachable$/);
      expect(network.slice(1)).toEqual([
        'loopback unreachable',
        'metadata unreachable',
        `routes ${5 + own}`,
        'way out 1',
        '',
      ]);
      // Ended, it is entered no more.
      expect(r.afterEnd).toMatch(/not set up/);
    },
    120_000,
  );
});
