/**
 * `cp -r --exclude/--include` as `aws s3 cp` reads them: shell patterns (Python's fnmatch, `*` across `/`) against
 * the path in the folder, in order, the last match deciding.
 */
import { describe, expect, it } from 'vitest';
import { copyFilter, isCopied } from '../src/copy-filters.ts';

const ex = (p: string) => copyFilter(false, p);
const inc = (p: string) => copyFilter(true, p);

describe('cp filters', () => {
  it('copy everything without filters, and decide by the last filter that matches', () => {
    expect(isCopied([], 'any/path.bin')).toBe(true);
    const ptOnly = [ex('*'), inc('*.pt')];
    expect(['a.pt', 'deep/er/b.pt', 'c.txt', 'd.pt.tmp'].map((p) => isCopied(ptOnly, p))).toEqual([
      true,
      true,
      false,
      false,
    ]);
    // Later takes precedence: the include before the exclude is undone by it.
    expect(isCopied([inc('*.pt'), ex('*')], 'a.pt')).toBe(false);
    expect(isCopied([ex('logs/*')], 'logs/x/y.txt')).toBe(false);
    expect(isCopied([ex('logs/*')], 'other/logs/y.txt')).toBe(true);
  });

  it('read ?, classes and negated classes as fnmatch does, everything else as itself', () => {
    expect(isCopied([ex('step-?.ckpt')], 'step-7.ckpt')).toBe(false);
    expect(isCopied([ex('step-?.ckpt')], 'step-10.ckpt')).toBe(true);
    expect(isCopied([ex('[a-c]*')], 'b.txt')).toBe(false);
    expect(isCopied([ex('[!a-c]*')], 'b.txt')).toBe(true);
    expect(isCopied([ex('[]x].md')], '].md')).toBe(false);
    // Regular expression characters are themselves: `.` is a dot, `(` a parenthesis, `+` a plus.
    expect(isCopied([ex('a.b')], 'axb')).toBe(true);
    expect(isCopied([ex('run(1)+.log')], 'run(1)+.log')).toBe(false);
    // A `[` that opens no class is itself.
    expect(isCopied([ex('a[b')], 'a[b')).toBe(false);
    // The whole path must match, not a part of it.
    expect(isCopied([ex('*.tmp')], 'a.tmp.keep')).toBe(true);
  });
});
