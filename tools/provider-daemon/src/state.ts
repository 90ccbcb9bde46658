/** What the daemon keeps across restarts, in one JSON file written atomically (a temporary file, then a rename). */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export interface DaemonState {
  /** The registry's ID of this machine, once registered. */
  provider_id?: string;
}

export function readState(file: string): DaemonState {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as DaemonState;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new Error(`cannot read the daemon's state file ${file}: ${(err as Error).message}`);
  }
}

export function writeState(file: string, state: DaemonState): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, file);
}
