/**
 * The lifeline's terms: how a process hands a program it starts a pipe that tells the program when its starter is
 * gone, however it went (`kill -9` included: the kernel closes the starter's end). `pnpm start`'s supervisor
 * (scripts/lib/supervisor.ts), `pnpm demo`, the tests' and the benchmarks' platforms start programs so; the program's
 * end (scripts/lib/lifeline.ts, preloaded into it) reads them and stops as on SIGTERM when the pipe closes. Node has
 * no prctl(PR_SET_PDEATHSIG): a pipe is what it has.
 *
 *   spawn(process.execPath, ['--import', lifeline, program], {
 *     env: { ...env, ...lifelineEnv(5_000) },
 *     stdio: ['ignore', 'pipe', 'pipe', 'pipe'], // descriptor LIFELINE_FD: held here, never written
 *   });
 */

/** The environment variable that tells a child where its lifeline is and how long it has to stop: `<fd>:<grace ms>`. */
export const LIFELINE_ENV = 'SUPERVISOR_LIFELINE';
/** The lifeline's descriptor in the child: the first after stdin, stdout and stderr. */
export const LIFELINE_FD = 3;

/**
 * The environment that hands a program this process starts its lifeline, with `graceMs` to stop in: spawn it with a
 * pipe on descriptor `LIFELINE_FD` (`stdio: [..., 'pipe']`), which this process holds and never writes. A program that
 * watches it (scripts/lib/lifeline.ts: preloaded into the supervisor's children, imported first by `pnpm start`
 * itself) stops as on SIGTERM when this process is gone, however it went.
 */
export const lifelineEnv = (graceMs: number) => ({ [LIFELINE_ENV]: `${LIFELINE_FD}:${graceMs}` });

/** The lifeline a child was given (SUPERVISOR_LIFELINE's value), or undefined when none (or not one of ours). */
export function parseLifeline(value: string | undefined): { fd: number; graceMs: number } | undefined {
  const m = /^(\d+):(\d+)$/.exec(value ?? '');
  if (!m) return undefined;
  const fd = Number(m[1]);
  return fd > 2 ? { fd, graceMs: Number(m[2]) } : undefined;
}
