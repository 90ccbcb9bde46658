/** `mv -r` down refuses objects that would be written to one file (it would delete them all, keeping one). */
import type { ObjectInfo } from '@gpu/client';
import { describe, expect, it, vi } from 'vitest';
import { sameFiles } from '../src/storage-download.ts';

const object = (key: string) => ({ key, size: 1, etag: '"e"' }) as ObjectInfo;
const clash = [
  { object: object('runs/x//y'), file: '/out/x/y' },
  { object: object('runs/x/y'), file: '/out/x/y' },
  { object: object('runs/z'), file: '/out/z' },
];

describe('objects written to one file', () => {
  it('refuse a move before anything moves, naming them', () => {
    expect(() => sameFiles(clash, { recursive: true, removeSource: async () => {} })).toThrow(
      'objects would be written to the same file (gpu:runs/x//y and gpu:runs/x/y -> /out/x/y): nothing moved',
    );
  });

  it('are said by a copy, which goes on', () => {
    const said = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      expect(() => sameFiles(clash, { recursive: true })).not.toThrow();
      expect(said).toHaveBeenCalledWith(expect.stringContaining('gpu:runs/x//y and gpu:runs/x/y -> /out/x/y'));
    } finally {
      said.mockRestore();
    }
  });

  it('are none when every object has a file of its own', () => {
    expect(() => sameFiles(clash.slice(1), { recursive: true, removeSource: async () => {} })).not.toThrow();
  });
});
