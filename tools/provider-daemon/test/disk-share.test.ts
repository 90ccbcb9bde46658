/**
 * The disk a machine can promise each workload (disk.ts `diskShareMb`): a third of each GPU's share of the disk under
 * the run directory, less each filesystem's inode table; the filesystems of workloads already there (a restarted
 * daemon's) are counted as theirs, not as taken, while any other file takes its room.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { diskShareMb } from '../src/workloads/disk.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'disk-share-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
/** Others write to this disk meanwhile: a few MB either way. */
const NEAR = 8;

describe('the disk each workload is promised', () => {
  it("is a third of each GPU's share, less each filesystem's inode table", () => {
    const one = diskShareMb(dir, 1, 0);
    expect(one).toBeGreaterThan(0);
    expect(Math.abs(diskShareMb(dir, 4, 0) - one / 4)).toBeLessThan(NEAR);
    // A million inodes of 256 bytes a filesystem: 244 MiB of each GPU's share, a third of it off the allowance.
    expect(Math.abs(one - diskShareMb(dir, 1, 1_000_000) - (1_000_000 * 256) / 3 / 2 ** 20)).toBeLessThan(NEAR);
  });

  it('counts the filesystems already there as held, and any other file as taken', () => {
    const before = diskShareMb(dir, 1, 0);
    mkdirSync(path.join(dir, 'session-1'));
    execFileSync('fallocate', ['-l', String(96 * 1024 * 1024), path.join(dir, 'session-1', 'disk.img')]);
    expect(Math.abs(diskShareMb(dir, 1, 0) - before)).toBeLessThan(NEAR);
    execFileSync('fallocate', ['-l', String(96 * 1024 * 1024), path.join(dir, 'session-1', 'inputs.tar')]);
    expect(Math.abs(before - diskShareMb(dir, 1, 0) - 32)).toBeLessThan(NEAR);
  });
});
