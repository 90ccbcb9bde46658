/**
 * The benchmarks' own kit (`pnpm bench <name>`; scripts/bench.sh runs them): each benchmark of a service or tool, and
 * the start-up benchmark of scripts/, reports and measures through it, so no benchmark imports the repository's
 * scripts and the scripts import no benchmark's code: both depend on this package.
 */
export { type CpuSnapshot, cpuSince, cpuSnapshot, processMs } from './process-cpu.ts';
export { machineLine, writeBenchSection } from './report.ts';
