/**
 * What a renter's workload is, in one schema for every party: billing checks it when a session starts with one, the
 * provider daemon checks it again before it runs anything (it never trusts what reached it), and the documents of
 * both show it.
 *
 * Sandbox mode runs `command`, an argv array (never a shell string: the first element is the program, a path or a
 * name looked up in the sandbox's `PATH`, `/usr/local/bin:/usr/bin:/bin`), with `env`, for at most
 * `max_runtime_seconds`, reaching the network only when `network` is true.
 *
 * Environment names are POSIX-portable (`[A-Za-z_][A-Za-z0-9_]*`); the dynamic loader's (`LD_*`) are **refused**, as are
 * the names the platform sets itself in the sandbox (`PATH`, `HOME`, `TMPDIR`, `CUDA_VISIBLE_DEVICES`,
 * `NVIDIA_VISIBLE_DEVICES` and every `GPU_PLATFORM_*`): a request naming one is a 400 that names it, never silently
 * overridden.
 */
import { z } from 'zod';

/** Bounds of a workload spec (bytes are UTF-8). */
export const WORKLOAD_LIMITS = {
  argvEntries: 256,
  argBytes: 4096,
  argvBytes: 65_536,
  envEntries: 64,
  envNameBytes: 128,
  envValueBytes: 4096,
  envBytes: 32_768,
  /** A week: a longer job runs as several sessions. */
  maxRuntimeSeconds: 604_800,
} as const;

/** Names a renter may not set: the loader's, and those the platform sets in the sandbox. */
const RESERVED_ENV = new Set(['PATH', 'HOME', 'TMPDIR', 'CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES']);

/** Why an environment variable's name is refused, or null when it may be set. */
export function refusedEnvName(name: string): string | null {
  if (/^LD_/i.test(name)) return `${name} is the dynamic loader's: refused`;
  if (RESERVED_ENV.has(name) || name.startsWith('GPU_PLATFORM_')) return `${name} is set by the platform: refused`;
  return null;
}

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

const argSchema = z
  .string()
  .max(WORKLOAD_LIMITS.argBytes)
  .refine((s) => bytes(s) <= WORKLOAD_LIMITS.argBytes, `at most ${WORKLOAD_LIMITS.argBytes} bytes`)
  .refine((s) => !s.includes('\0'), 'no NUL byte');

const envSchema = z
  .record(
    z
      .string()
      .max(WORKLOAD_LIMITS.envNameBytes)
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'letters, digits and _, not starting with a digit'),
    z
      .string()
      .max(WORKLOAD_LIMITS.envValueBytes)
      .refine((s) => !s.includes('\0'), 'no NUL byte'),
  )
  .superRefine((env, ctx) => {
    const names = Object.keys(env);
    if (names.length > WORKLOAD_LIMITS.envEntries) {
      ctx.addIssue({ code: 'custom', message: `at most ${WORKLOAD_LIMITS.envEntries} variables` });
    }
    for (const name of names) {
      const why = refusedEnvName(name);
      if (why) ctx.addIssue({ code: 'custom', path: [name], message: why });
    }
    const total = names.reduce((n, k) => n + bytes(k) + bytes(env[k]!) + 2, 0);
    if (total > WORKLOAD_LIMITS.envBytes) {
      ctx.addIssue({ code: 'custom', message: `at most ${WORKLOAD_LIMITS.envBytes} bytes of names and values` });
    }
  });

/** A workload to run on the session's GPUs (sandbox mode). */
export const workloadSpecSchema = z
  .object({
    command: z
      .array(argSchema)
      .min(1)
      .max(WORKLOAD_LIMITS.argvEntries)
      .refine((argv) => argv[0] !== '', 'the program (the first element) is not empty')
      .refine(
        (argv) => argv.reduce((n, a) => n + bytes(a) + 1, 0) <= WORKLOAD_LIMITS.argvBytes,
        `at most ${WORKLOAD_LIMITS.argvBytes} bytes in all`,
      )
      .describe('the program and its arguments (argv; never a shell string)'),
    env: envSchema.default({}).describe('environment variables (LD_* and the platform-set names are refused)'),
    max_runtime_seconds: z
      .number()
      .int()
      .min(1)
      .max(WORKLOAD_LIMITS.maxRuntimeSeconds)
      .describe('the workload is stopped after running this long'),
    network: z.boolean().default(false).describe('whether the workload may reach the network (default: no)'),
  })
  .strict()
  .describe('What the session runs on its GPUs (sandbox mode)');

export type WorkloadSpec = z.infer<typeof workloadSpecSchema>;
