/**
 * What the daemon keeps across restarts, in one JSON file written atomically and durably (a temporary file, synced,
 * then a rename: write-file-atomic), so that a power loss leaves the old file or the new one, never an empty one.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import writeFileAtomic from 'write-file-atomic';

export interface DaemonState {
  /** The registry's ID of this machine, once registered. */
  provider_id?: string;
}

/**
 * The state in `file`: none when there is no file, and none (`onLost` says why) when it holds no state (cut short or
 * written over by something else): the daemon then finds its machine again by name, as after a lost file. A file it
 * cannot read at all (its permissions) is an error.
 */
export function readState(file: string, onLost: (why: string) => void = () => {}): DaemonState {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new Error(`cannot read the daemon's state file ${file}: ${(err as Error).message}`);
  }
  try {
    const state: unknown = JSON.parse(text);
    if (typeof state !== 'object' || state === null || Array.isArray(state)) throw new Error('not an object');
    const id = (state as DaemonState).provider_id;
    return typeof id === 'string' ? { provider_id: id } : {};
  } catch (err) {
    onLost(`the state file ${file} holds no state (${(err as Error).message}): finding the machine by name`);
    return {};
  }
}

/** Writes a file durably: the old content or the new, whatever happens meanwhile (mode `mode`). */
export function writeDurably(file: string, text: string, mode = 0o600): void {
  writeFileAtomic.sync(file, text, { mode, fsync: true });
}

export function writeState(file: string, state: DaemonState): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  writeDurably(file, `${JSON.stringify(state, null, 2)}\n`);
}
