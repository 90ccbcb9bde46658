/**
 * A keypair file as `gpu wallet` reads it (`readKeypair`): one `solana-keygen` writes is read; anything else is one
 * line saying what the file should be, never a word of what it holds (a secret pasted into it, such as the base58 one
 * a browser wallet exports, is not echoed by the JSON parser's message).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Keypair } from '@solana/web3.js';
import bs58 from 'bs58';
import { afterAll, describe, expect, it } from 'vitest';
import { readKeypair } from '../src/solana.ts';

const dir = mkdtempSync(join(tmpdir(), 'client-keypair-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text, { mode: 0o600 });
  return path;
};

describe('a keypair file', () => {
  it('reads the JSON array of 64 numbers solana-keygen writes', () => {
    const keypair = Keypair.generate();
    const read = readKeypair(file('id.json', JSON.stringify(Array.from(keypair.secretKey))));
    expect(read.publicKey.toBase58()).toBe(keypair.publicKey.toBase58());
  });

  it('refuses anything else without repeating a word of it', () => {
    const secret = bs58.encode(Keypair.generate().secretKey);
    const cases = {
      'base58.txt': secret,
      'short.json': JSON.stringify(Array.from({ length: 63 }, () => 7)),
      'words.json': JSON.stringify(Array.from({ length: 64 }, () => 'x')),
      'big.json': JSON.stringify(Array.from({ length: 64 }, () => 256)),
    };
    for (const [name, text] of Object.entries(cases)) {
      const path = file(name, text);
      expect(() => readKeypair(path), name).toThrow(`${path} is not a Solana keypair file`);
      try {
        readKeypair(path);
      } catch (err) {
        expect((err as Error).message).not.toContain(text.slice(0, 6));
      }
    }
  });
});
