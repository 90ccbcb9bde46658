/**
 * A PostgreSQL server of a test's own, so the test can stop and start it (a
 * real outage) without disturbing the shared test server.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function pgBin(): string {
  const versions = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(a) - Number(b));
  const latest = versions.at(-1);
  if (!latest) throw new Error('no PostgreSQL installation under /usr/lib/postgresql');
  return join('/usr/lib/postgresql', latest, 'bin');
}

export class DedicatedPostgres {
  private readonly dir = mkdtempSync(join(tmpdir(), 'registry-pg-'));
  private readonly bin = pgBin();
  private readonly asPostgres = process.getuid?.() === 0;

  constructor(readonly port: number) {}

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  private run(tool: string, args: string[]): void {
    const cmd = join(this.bin, tool);
    if (this.asPostgres) execFileSync('runuser', ['-u', 'postgres', '--', cmd, ...args], { stdio: 'pipe' });
    else execFileSync(cmd, args, { stdio: 'pipe' });
  }

  init(): this {
    mkdirSync(join(this.dir, 'sock'));
    if (this.asPostgres) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
      chownSync(this.dir, uid, gid);
      chownSync(join(this.dir, 'sock'), uid, gid);
    }
    this.run('initdb', ['-D', join(this.dir, 'data'), '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
    return this;
  }

  start(): void {
    this.run('pg_ctl', [
      '-D',
      join(this.dir, 'data'),
      '-l',
      join(this.dir, 'log'),
      '-w',
      '-o',
      `-c listen_addresses=127.0.0.1 -p ${this.port} -k ${join(this.dir, 'sock')} -c fsync=off`,
      'start',
    ]);
  }

  stop(): void {
    this.run('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
  }

  destroy(): void {
    try {
      this.stop();
    } catch {}
    rmSync(this.dir, { recursive: true, force: true });
  }
}
