/** A pino destination that keeps the JSON lines a test's logger writes. */
import { Writable } from 'node:stream';
import type { DestinationStream } from 'pino';

export function captureLogs(): { destination: DestinationStream; lines: () => Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
      cb();
    },
  });
  return { destination: destination as unknown as DestinationStream, lines: () => lines };
}
