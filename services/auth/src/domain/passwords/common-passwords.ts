/**
 * The shipped list of common and breached passwords: the ~49,000 most common
 * passwords of public breach corpora, as packaged by zxcvbn-ts
 * (`@zxcvbn-ts/language-common`), plus an operator's own file.
 */
import { readFileSync } from 'node:fs';
import { dictionary } from '@zxcvbn-ts/language-common';

/** A set of blocked passwords, compared lower-case. */
export function loadBlocklist(extraFile = ''): Set<string> {
  const words = new Set<string>();
  for (const w of dictionary['passwords-common']) words.add(w.toLowerCase());
  if (extraFile) {
    for (const line of readFileSync(extraFile, 'utf8').split(/\r?\n/)) {
      const w = line.trim();
      if (w && !w.startsWith('#')) words.add(w.toLowerCase());
    }
  }
  return words;
}
