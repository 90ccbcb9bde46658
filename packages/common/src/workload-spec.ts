/**
 * What a renter's workload is, in one schema for every party: billing checks it when a session starts with one, the
 * provider daemon checks it again before it runs anything (it never trusts what reached it), and the documents of
 * both show it.
 *
 * Sandbox mode runs `command`, an argv array (never a shell string: the first element is the program, a path or a
 * name looked up in the sandbox's `PATH`, `/usr/local/bin:/usr/bin:/bin`), with `env`, for at most
 * `max_runtime_seconds`, reaching the network only when `network` is true.
 *
 * Container mode (`image`, an OCI image reference) runs the image on a machine with a container runtime: its own
 * entrypoint and command, or `command` instead of both (argv as given). Its variables are one line each (the runtime
 * reads them from a file of lines), and none is named `NVIDIA_*` (the GPU runtime's hooks act on those).
 *
 * Environment names are POSIX-portable (`[A-Za-z_][A-Za-z0-9_]*`); the dynamic loader's (`LD_*`) are **refused**, as are
 * the names the platform sets itself in the sandbox (`PATH`, `HOME`, `TMPDIR`, `CUDA_VISIBLE_DEVICES`,
 * `NVIDIA_VISIBLE_DEVICES` and every `GPU_PLATFORM_*`): a request naming one is a 400 that names it, never silently
 * overridden.
 *
 * Files move through the renter's storage, never through the daemon's own: each of `inputs` (an object of the renter's:
 * a key in their folder of the default bucket, or in a bucket of theirs when `bucket` is named) is fetched before the
 * workload starts and appears read-only at `/work/inputs/<path>` (`path`: the key when not given); the workload's
 * standard output and error are kept at `<output.prefix>logs/stdout.log` and `logs/stderr.log`, and what it leaves in
 * `/work/output/` is uploaded at its end under `<output.prefix>output/`. Keys, prefixes and paths follow the storage
 * service's key rules (`object-names.ts`): relative, no `.` or `..` segment, at most 1024 bytes, so none escapes.
 *
 * A job's workload may name a `checkpoint` interval: what it leaves in `/work/checkpoint/` is taken (a tar of the
 * directory) that often while it runs and once more when it ends, kept in the renter's storage, and extracted into
 * `/work/checkpoint/` before the job's next attempt starts, on whatever machine.
 */
import { z } from 'zod';
import {
  MAX_KEY_BYTES,
  OBJECT_KEY_PATTERN,
  objectKeyProblem,
  wellFormed,
  zBucketName,
  zObjectKey,
} from './object-names.ts';
import { maxSegmentUtf8Bytes, maxUtf8Bytes } from './openapi/extensions.ts';

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
  inputs: 64,
  /** The shortest interval between two checkpoints of a running workload. */
  minCheckpointSeconds: 5,
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

/** Text without a NUL byte (a program's arguments and variables are C strings). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing NUL is the point
const NO_NUL = /^[^\u0000]*$/;

const argSchema = maxUtf8Bytes(
  z.string().max(WORKLOAD_LIMITS.argBytes).regex(NO_NUL, 'no NUL byte'),
  WORKLOAD_LIMITS.argBytes,
);

const envSchema = z
  .record(
    z
      .string()
      .max(WORKLOAD_LIMITS.envNameBytes)
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'letters, digits and _, not starting with a digit'),
    z.string().max(WORKLOAD_LIMITS.envValueBytes).regex(NO_NUL, 'no NUL byte'),
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

const bucketName = zBucketName().describe(
  "a bucket of the renter's (absent: their folder of the default bucket, keys relative to it)",
);
const objectKey = zObjectKey();
/** A key's rules with no empty segment: each segment a file name (`//` and a trailing `/` are refused). */
const INPUT_PATH_PATTERN = new RegExp(`^(?!.*//)(?!.*/$)${OBJECT_KEY_PATTERN.source.slice(1)}`);
/** A path inside the sandbox's inputs directory: a key's rules, and each segment a file name of 1 to 255 bytes. */
const inputPath = maxSegmentUtf8Bytes(
  maxUtf8Bytes(
    z
      .string()
      .max(MAX_KEY_BYTES)
      .regex(INPUT_PATH_PATTERN, {
        error: (issue) => objectKeyProblem(String(issue.input)) ?? 'each segment is a file name of 1 to 255 bytes',
      })
      // A lone surrogate has no UTF-8 form: no file could be named so.
      .refine(wellFormed, { error: (issue) => objectKeyProblem(String(issue.input)) }),
    MAX_KEY_BYTES,
  ),
  255,
  'each segment is a file name of 1 to 255 bytes',
);

const inputSchema = z
  .object({
    bucket: bucketName.optional(),
    key: objectKey.describe("the object's key (relative to the renter's folder when no bucket is named)"),
    path: inputPath.optional().describe('where it appears under /work/inputs/ (default: its key)'),
  })
  .strict();

const outputSchema = z
  .object({
    bucket: bucketName.optional(),
    prefix: objectKey.describe(
      'where logs (`logs/`) and outputs (`output/`) are written; a `/` is added when it has none',
    ),
  })
  .strict()
  .describe("the workload's place in the renter's storage (default: `sessions/<session id>/` in their folder)");

const checkpointSchema = z
  .object({
    interval_seconds: z
      .number()
      .int()
      .min(WORKLOAD_LIMITS.minCheckpointSeconds)
      .max(86_400)
      .describe(
        'how often the checkpoint directory is taken while the workload runs (it is taken once more when it ends)',
      ),
  })
  .strict()
  .describe(
    "a job's checkpoint directory, `/work/checkpoint/` (`GPU_PLATFORM_CHECKPOINT_DIR`): kept in the renter's storage while the workload runs and when it ends, and restored there before the job's next attempt starts (jobs only)",
  );

/**
 * An OCI image reference: `[registry[:port]/]path[:tag][@sha256:<digest>]`, the distribution spec's grammar (a path of
 * lower-case components); it starts with a letter or digit, so no runtime takes it for an option.
 */
const IMAGE_REFERENCE =
  /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?\/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$/;

/** A workload to run on the session's GPUs: a command in the sandbox, or an image in a container. */
export const workloadSpecSchema = z
  .object({
    image: z
      .string()
      .max(512)
      .regex(IMAGE_REFERENCE, 'an OCI image reference ([registry/]name[:tag][@sha256:digest])')
      .optional()
      .describe('an OCI image to run (container mode; the machine needs a container runtime)'),
    command: z
      .array(argSchema)
      .min(1)
      .max(WORKLOAD_LIMITS.argvEntries)
      .refine((argv) => argv[0] !== '', 'the program (the first element) is not empty')
      .refine(
        (argv) => argv.reduce((n, a) => n + bytes(a) + 1, 0) <= WORKLOAD_LIMITS.argvBytes,
        `at most ${WORKLOAD_LIMITS.argvBytes} bytes in all`,
      )
      .optional()
      .describe(
        "the program and its arguments (argv; never a shell string): required without an image, else the image's entrypoint and command",
      ),
    env: envSchema.default({}).describe('environment variables (LD_* and the platform-set names are refused)'),
    max_runtime_seconds: z
      .number()
      .int()
      .min(1)
      .max(WORKLOAD_LIMITS.maxRuntimeSeconds)
      .describe('the workload is stopped after running this long'),
    network: z.boolean().default(false).describe('whether the workload may reach the network (default: no)'),
    idle: z
      .boolean()
      .optional()
      .describe(
        "an idle workload: the sandbox (or the image's container) kept running with nothing in it but a waiting process, to reach with `gpu shell` and `gpu exec` (no `command`); billed as running, it ends with the session or at `max_runtime_seconds`",
      ),
    inputs: z
      .array(inputSchema)
      .max(WORKLOAD_LIMITS.inputs)
      .default([])
      .superRefine((inputs, ctx) => {
        const seen = new Set<string>();
        for (const [i, input] of inputs.entries()) {
          const at = input.path ?? input.key;
          const clash = [...seen].find((p) => p === at || p.startsWith(`${at}/`) || at.startsWith(`${p}/`));
          if (clash !== undefined)
            ctx.addIssue({ code: 'custom', path: [i, 'path'], message: `${at} clashes with ${clash}` });
          seen.add(at);
        }
      })
      .describe("objects of the renter's, read-only under /work/inputs/"),
    output: outputSchema.optional(),
    checkpoint: checkpointSchema.optional(),
  })
  .strict()
  .superRefine((spec, ctx) => {
    if (spec.idle && spec.command) {
      ctx.addIssue({ code: 'custom', path: ['command'], message: 'an idle workload runs no command of its own' });
    }
    if (!spec.image && !spec.command && !spec.idle) {
      ctx.addIssue({ code: 'custom', path: ['command'], message: 'a command is required without an image' });
    }
    if (spec.image) {
      for (const [name, value] of Object.entries(spec.env)) {
        if (/[\r\n]/.test(value))
          ctx.addIssue({ code: 'custom', path: ['env', name], message: "a container's variables are one line each" });
        // The NVIDIA container hooks act on these: which GPUs, capabilities and driver a container gets.
        if (name.startsWith('NVIDIA_'))
          ctx.addIssue({ code: 'custom', path: ['env', name], message: `${name} is the GPU runtime's: refused` });
      }
    }
  })
  .describe('What the session runs on its GPUs: a command in the sandbox, or an image in a container');

export type WorkloadSpec = z.infer<typeof workloadSpecSchema>;
export type WorkloadInput = WorkloadSpec['inputs'][number];
export type WorkloadOutput = NonNullable<WorkloadSpec['output']>;

/** Where an input appears under `/work/inputs/`. */
export const inputPathOf = (input: WorkloadInput) => input.path ?? input.key;

/** The session's output as it is kept: its prefix ending with `/` (the default place when the spec names none). */
export function settledOutput(sessionId: string, output: WorkloadOutput | undefined): WorkloadOutput {
  if (!output) return defaultWorkloadOutput(sessionId);
  return { ...output, prefix: output.prefix.endsWith('/') ? output.prefix : `${output.prefix}/` };
}

/** The default place of a session's files in its renter's folder. */
const defaultWorkloadOutput = (sessionId: string): WorkloadOutput => ({ prefix: `sessions/${sessionId}/` });

/** Under the output prefix: the logs' keys, and the folder of what the workload left in `/work/output/`. */
export const WORKLOAD_FILES = {
  stdout: 'logs/stdout.log',
  stderr: 'logs/stderr.log',
  output: 'output/',
} as const;

/** The checkpoint directory inside the workload (a job's: `checkpoint` in its spec), and its variable's name. */
export const CHECKPOINT_DIR = { inside: '/work/checkpoint', env: 'GPU_PLATFORM_CHECKPOINT_DIR' } as const;

/**
 * The notice a workload gets before it is stopped on purpose (an interruptible session preempted): a JSON file
 * `{reason, at, deadline}` written at that path inside it just before SIGTERM (absent until then), and its
 * variable's name. SIGKILL follows at `deadline`.
 */
export const NOTICE_FILE = { inside: '/work/.gpu-notice.json', env: 'GPU_PLATFORM_NOTICE_FILE' } as const;

/** What storage puts before a user's keys in the default bucket: `users/<user id>/` (a UUID). */
const USER_FOLDER_BYTES = 'users/'.length + 36 + 1;

/**
 * The longest path under `/work/output/` (in UTF-8 bytes) whose object key keeps storage's 1024 bytes: the prefix,
 * `output/` and the path, in the renter's folder of the default bucket unless a bucket is named.
 */
export function maxOutputPathBytes(output: WorkloadOutput): number {
  const folder = output.bucket === undefined ? USER_FOLDER_BYTES : 0;
  return 1024 - folder - bytes(output.prefix) - WORKLOAD_FILES.output.length;
}
