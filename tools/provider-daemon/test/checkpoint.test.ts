/**
 * A job's checkpoint as a tar (src/workloads/checkpoint.ts), with the machine's GNU tar: what is packed from an ended
 * workload's directory holds links as links (never what they point at), a tar above the allowance is refused, and a
 * hostile tar (the renter's storage holds whatever they put there) writes nothing outside the directory it is
 * extracted into, as the workload's user.
 */
import { spawnSync } from 'node:child_process';
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CheckpointError, packDirectory, unpack } from '../src/workloads/checkpoint.ts';

const isRoot = process.getuid?.() === 0;
let dir = '';

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'checkpoint-'));
  // A workload's user passes through to what it owns inside.
  spawnSync('chmod', ['0755', dir]);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The names in a tar, as `tar -tv` lists them. */
const listing = (file: string) => spawnSync('tar', ['-tvf', file]).stdout.toString();

describe('checkpoint tar', () => {
  it('packs what an ended workload left, links as links, and refuses a tar above the allowance', async () => {
    const work = path.join(dir, 'work');
    mkdirSync(path.join(work, 'checkpoint', 'model'), { recursive: true });
    writeFileSync(path.join(work, 'checkpoint', 'model', 'weights.bin'), 'w'.repeat(4096));
    writeFileSync(path.join(dir, 'secret'), 'the daemon token');
    symlinkSync(path.join(dir, 'secret'), path.join(work, 'checkpoint', 'leak'));
    const out = path.join(dir, 'out.tar');
    expect(await packDirectory(work, out, 1 << 20)).toBe(true);
    const names = listing(out);
    expect(names).toContain('./model/weights.bin');
    expect(names).toMatch(/\.\/leak -> .*secret/);
    expect(readFileSync(out).includes('the daemon token')).toBe(false);
    await expect(packDirectory(work, path.join(dir, 'small.tar'), 1024)).rejects.toBeInstanceOf(CheckpointError);
    expect(existsSync(path.join(dir, 'small.tar'))).toBe(false);
    expect(await packDirectory(path.join(dir, 'none'), path.join(dir, 'none.tar'), 1 << 20)).toBe(false);
    // A workload that left a link as its checkpoint directory itself gets nothing of where it points.
    const linked = path.join(dir, 'linked');
    mkdirSync(linked);
    symlinkSync(dir, path.join(linked, 'checkpoint'));
    expect(await packDirectory(linked, path.join(dir, 'linked.tar'), 1 << 20)).toBe(false);
    expect(existsSync(path.join(dir, 'linked.tar'))).toBe(false);
  });

  it('keeps a tar of a directory the workload changes while it is read (a file renamed in)', async () => {
    const work = path.join(dir, 'work');
    const checkpoint = path.join(work, 'checkpoint');
    mkdirSync(checkpoint, { recursive: true });
    for (let i = 0; i < 200; i++) writeFileSync(path.join(checkpoint, `f${i}`), 'x'.repeat(20_000));
    // A writer renaming new files in while tar reads: the tar is kept all the same, whole.
    let writing = true;
    const writer = (async () => {
      for (let n = 0; writing; n++) {
        writeFileSync(path.join(checkpoint, 'n.tmp'), String(n));
        renameSync(path.join(checkpoint, 'n.tmp'), path.join(checkpoint, 'n'));
        await new Promise((r) => setImmediate(r));
      }
    })();
    const out = path.join(dir, 'busy.tar');
    try {
      expect(await packDirectory(work, out, 64 << 20)).toBe(true);
    } finally {
      writing = false;
      await writer;
    }
    expect(spawnSync('tar', ['-tf', out]).status).toBe(0);
  });

  it("packs a running workload's directory (a daemon that is not root) without reading through links it swaps in", async () => {
    const work = path.join(dir, 'work');
    const checkpoint = path.join(work, 'checkpoint');
    mkdirSync(path.join(checkpoint, 'sub'), { recursive: true });
    writeFileSync(path.join(checkpoint, 'step'), '7');
    writeFileSync(path.join(checkpoint, 'sub', 'weights'), 'w'.repeat(1000));
    const secrets = path.join(dir, 'secrets');
    mkdirSync(secrets);
    writeFileSync(path.join(secrets, 'weights'), 'the daemon token');
    // The workload swaps links to the machine's files in for its directory and for a directory in it, as fast as it
    // can, while the daemon packs it again and again.
    let swapping = true;
    const swapper = (async () => {
      while (swapping) {
        for (const [real, aside] of [
          [path.join(checkpoint, 'sub'), path.join(checkpoint, 'sub.real')],
          [checkpoint, path.join(work, 'checkpoint.real')],
        ] as const) {
          renameSync(real, aside);
          symlinkSync(secrets, real);
          await new Promise((r) => setImmediate(r));
          rmSync(real);
          renameSync(aside, real);
        }
        await new Promise((r) => setImmediate(r));
      }
    })();
    let packed = 0;
    try {
      // Forty packs, and more until one is made (a busy machine can have the swaps land in many of them).
      for (let i = 0; i < 40 || (packed === 0 && i < 200); i++) {
        const out = path.join(dir, `live-${i}.tar`);
        // A pack may fail while the links come and go (tar: "Cannot readlink" of an entry that is a directory again),
        // as the runner's "not taken this time": the workload's own loss. What no pack may do is read the machine's.
        const made = await packDirectory(work, out, 1 << 20).catch((err: unknown) => {
          if (err instanceof CheckpointError) return false;
          throw err;
        });
        if (made) {
          packed += 1;
          expect(readFileSync(out).includes('the daemon token'), `tar ${i}`).toBe(false);
        }
      }
    } finally {
      swapping = false;
      await swapper;
    }
    expect(packed).toBeGreaterThan(0);
    // Once the workload stops swapping, the tar holds what it wrote.
    const out = path.join(dir, 'quiet.tar');
    expect(await packDirectory(work, out, 1 << 20)).toBe(true);
    expect(listing(out)).toContain('./sub/weights');
    expect(spawnSync('tar', ['-xOf', out, './step']).stdout.toString()).toBe('7');
  });

  it('extracts a hostile tar only inside its directory, as the workload user', async () => {
    const outside = path.join(dir, 'outside');
    mkdirSync(outside);
    const uid = isRoot ? 65534 : undefined;
    // Built with Python's tarfile: names that climb out, an absolute name, and a link out with a file through it.
    const tar = path.join(dir, 'hostile.tar');
    const py = [
      'import io, sys, tarfile',
      'out = sys.argv[1]; outside = sys.argv[2]',
      'def add(t, name, data=b"x", kind=tarfile.REGTYPE, target=""):',
      '    i = tarfile.TarInfo(name); i.type = kind; i.linkname = target; i.size = len(data) if kind == tarfile.REGTYPE else 0',
      '    t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)',
      'with tarfile.open(out, "w") as t:',
      '    add(t, "./n", b"41\\n")',
      '    add(t, "../climbed")',
      '    add(t, outside + "/absolute")',
      '    add(t, "out", kind=tarfile.SYMTYPE, target=outside)',
      '    add(t, "out/through")',
      '    add(t, "hard", kind=tarfile.LNKTYPE, target="../../etc/passwd")',
    ].join('\n');
    const made = spawnSync('python3', ['-c', py, tar, outside]);
    expect(made.status, made.stderr.toString()).toBe(0);
    const into = path.join(dir, 'work', 'checkpoint');
    mkdirSync(into, { recursive: true });
    // The workload's user could write all around it: only tar's own rules keep the members inside.
    if (uid !== undefined) for (const d of [outside, path.join(dir, 'work'), into]) chownSync(d, uid, uid);
    // GNU tar skips what it refuses and says so (exit 2): the checkpoint is not restored.
    await expect(unpack(tar, into, uid)).rejects.toBeInstanceOf(CheckpointError);
    expect(readFileSync(path.join(into, 'n'), 'utf8')).toBe('41\n');
    expect(spawnSync('find', [outside, '-mindepth', '1']).stdout.toString()).toBe('');
    expect(existsSync(path.join(dir, 'climbed'))).toBe(false);
    expect(existsSync(path.join(dir, 'work', 'climbed'))).toBe(false);
  });
});
