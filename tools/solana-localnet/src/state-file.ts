/**
 * Optional persistence of the local chain across restarts: the SVM's own
 * snapshot (accounts, sysvars) in `<file>.svm` and the validator-side state
 * (slot, recent blockhashes, transaction history, faucet) as JSON in `<file>`.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { LiteSVM } from 'litesvm';
import { LocalChain } from './chain.ts';

/** Loads the chain saved in `file`, or null when there is none. */
export function loadChain(file: string, finalityDelaySlots: number): LocalChain | null {
  if (!existsSync(file) || !existsSync(`${file}.svm`)) return null;
  const svm = LiteSVM.fromBytes(readFileSync(`${file}.svm`));
  const chain = new LocalChain({ svm, finalityDelaySlots });
  chain.importState(JSON.parse(readFileSync(file, 'utf8')));
  return chain;
}

/** Writes the chain to `file` (atomically: temporary files, then rename). */
export function saveChain(chain: LocalChain, file: string): void {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(`${file}.svm.tmp`, chain.svm.toBytes());
  writeFileSync(`${file}.tmp`, JSON.stringify(chain.exportState()));
  renameSync(`${file}.svm.tmp`, `${file}.svm`);
  renameSync(`${file}.tmp`, file);
}
