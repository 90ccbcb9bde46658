/**
 * A process's fields in /proc/<pid>/stat after its command (which may hold spaces and parentheses), so the first is
 * its state (field 3 of proc(5)), then ppid, pgrp, ... (starttime is index 19); undefined where it cannot be read (the
 * process is gone, or /proc is not there).
 */
import { readFileSync } from 'node:fs';

export function procStat(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}
