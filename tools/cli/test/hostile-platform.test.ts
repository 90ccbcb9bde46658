/**
 * What a hostile or broken platform can make `gpu` print: nothing a terminal takes for a command. A problem's detail,
 * an object's key or a table's cell with an escape sequence (OSC 0 retitles the window, OSC 52 writes the clipboard)
 * is shown with its control characters written out (`\u001b`).
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { printable } from '../src/format.ts';
import { CLI_TEST_MS, gpuAt } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });
const dir = mkdtempSync(join(tmpdir(), 'gpu-hostile-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ESCAPES = '\u001b]0;owned\u0007\u001b]52;c;ZWNobyBvd25lZA==\u0007\u009b31m';

describe('a hostile platform', () => {
  it("prints no control character of a problem's detail on the terminal", async () => {
    const server = createServer((_req, res) => {
      res
        .writeHead(403, { 'content-type': 'application/problem+json' })
        .end(JSON.stringify({ status: 403, code: 'FORBIDDEN', detail: `no${ESCAPES}pe` }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const gpu = gpuAt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, join(dir, 'config'));
      const answer = await gpu(['whoami'], { env: { GPU_TOKEN: 't' } });
      expect(answer.code).toBe(1);
      // biome-ignore lint/suspicious/noControlCharactersInRegex: no control character is the point
      expect(answer.stderr).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
      expect(answer.stderr).toContain('no\\u001b]0;owned\\u0007');
    } finally {
      server.close();
    }
  });

  it('stops at a list that names the same next page again, rather than follow it for ever', async () => {
    let asked = 0;
    const server = createServer((req, res) => {
      req.resume();
      asked++;
      res.writeHead(200, { 'content-type': 'application/json', 'x-next-cursor': 'again' }).end('[]');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const gpu = gpuAt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, join(dir, 'config-loop'));
      for (const command of [
        ['storage', 'ls'],
        ['sessions', '--limit', '1000'],
      ]) {
        asked = 0;
        const answer = await gpu([...command, '--json'], { env: { GPU_TOKEN: 't' } });
        expect(answer.code, command.join(' ')).toBe(1);
        expect(answer.stderr).toContain('the list does not end');
        expect(asked).toBeLessThanOrEqual(3);
      }
    } finally {
      server.close();
    }
  });

  it('writes out the control characters of any text it shows, keeping line breaks and tabs', () => {
    expect(printable(`a${ESCAPES}\tb\nc`)).toBe(
      'a\\u001b]0;owned\\u0007\\u001b]52;c;ZWNobyBvd25lZA==\\u0007\\u009b31m\tb\nc',
    );
  });
});
