/**
 * `cp -r --exclude/--include`, as `aws s3 cp` reads them: each pattern is matched against a file's path relative to
 * the folder copied (`sub/a.tmp`, `/` between segments), the filters in the order given, the last one that matches
 * deciding (everything is included to begin with): `--exclude '*' --include '*.pt'` copies the `.pt` files alone.
 * A pattern is a shell pattern as aws's (Python's fnmatch) is: `*` any run of characters, `/` included; `?` any one;
 * `[abc]`, `[a-z]` one of; `[!abc]` one not of; anything else itself.
 */

/** One filter: whether a match includes or excludes, and what matches. */
export interface CopyFilter {
  include: boolean;
  pattern: string;
  matches: RegExp;
}

const SPECIAL = /[\\^$.*+?()[\]{}|/-]/g;

/** A shell pattern as a regular expression of the whole path. */
function translate(pattern: string): RegExp {
  let out = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') out += '.*';
    else if (c === '?') out += '.';
    else if (c === '[') {
      // A class runs to the next `]` (a `]` first in it is itself); without one, `[` is itself.
      let j = i + 1;
      if (pattern[j] === '!') j++;
      if (pattern[j] === ']') j++;
      while (j < pattern.length && pattern[j] !== ']') j++;
      if (j >= pattern.length) {
        out += '\\[';
        continue;
      }
      let body = pattern.slice(i + 1, j);
      const negated = body.startsWith('!');
      if (negated) body = body.slice(1);
      out += `[${negated ? '^' : ''}${body.replace(/[\\^\]]/g, (m, at: number) => (m === ']' && at === 0 ? '\\]' : `\\${m}`))}]`;
      i = j;
    } else out += c.replace(SPECIAL, '\\$&');
  }
  return new RegExp(`^${out}$`, 's');
}

export function copyFilter(include: boolean, pattern: string): CopyFilter {
  return { include, pattern, matches: translate(pattern) };
}

/** Whether the file at `relative` is copied under `filters`. */
export function isCopied(filters: readonly CopyFilter[], relative: string): boolean {
  let copied = true;
  for (const f of filters) if (f.matches.test(relative)) copied = f.include;
  return copied;
}
