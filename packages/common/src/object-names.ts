/**
 * Bucket names by S3's rules and object keys by its limits, for every party that names an object: the storage service
 * refuses a name or key that breaks them before any call to the store (its routes name the request field), and a
 * workload's spec (its inputs, its output prefix) is checked by the same rules wherever it is read.
 *
 * Each rule is one regular expression (with the byte limit of a key beside it), which the schemas check and the
 * OpenAPI documents state as the field's `pattern`: what a document says is exactly what is refused. The functions
 * that say why a value breaks a rule only explain a refusal the expression already made.
 */
import { z } from 'zod';
import { maxUtf8Bytes } from './openapi/extensions.ts';

/**
 * A bucket name by S3's rules: 3 to 63 of lowercase letters, digits, `.` and `-`, beginning and ending with a letter or
 * digit; no two adjacent dots; not an IPv4 address; no reserved prefix (`xn--`, `sthree-`, `amzn-s3-demo-`) or suffix
 * (`-s3alias`, `--ol-s3`, `.mrap`, `--x-s3`, `--table-s3`).
 */
export const BUCKET_NAME_PATTERN =
  /^(?!xn--|sthree-|amzn-s3-demo-)(?!.*(?:-s3alias|--ol-s3|\.mrap|--x-s3|--table-s3)$)(?!\d{1,3}(?:\.\d{1,3}){3}$)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

const BUCKET_CHARS = /^[a-z0-9][a-z0-9.-]*[a-z0-9]$/;
const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;
const RESERVED_PREFIXES = ['xn--', 'sthree-', 'amzn-s3-demo-'];
const RESERVED_SUFFIXES = ['-s3alias', '--ol-s3', '.mrap', '--x-s3', '--table-s3'];

/** Why a bucket name breaks S3's naming rules (`BUCKET_NAME_PATTERN`), or undefined when it is valid. */
export function bucketNameProblem(name: string): string | undefined {
  if (BUCKET_NAME_PATTERN.test(name)) return undefined;
  if (name.length < 3 || name.length > 63) return 'must be 3 to 63 characters long';
  if (!BUCKET_CHARS.test(name)) {
    return 'must use lowercase letters, digits, dots and hyphens, and begin and end with a letter or digit';
  }
  if (name.includes('..')) return 'must not contain two adjacent dots';
  if (IPV4.test(name)) return 'must not be formatted as an IP address';
  if (RESERVED_PREFIXES.some((p) => name.startsWith(p))) return 'must not start with a reserved prefix';
  if (RESERVED_SUFFIXES.some((s) => name.endsWith(s))) return 'must not end with a reserved suffix';
  return "must follow S3's bucket naming rules";
}

/** The most bytes of UTF-8 in a key (S3's limit). */
export const MAX_KEY_BYTES = 1024;

/**
 * An object key's characters: no control characters (C0, DEL, C1), no `.` or `..` segment, no leading `/`, no empty
 * segment (`a//b`: a store on a file system, the embedded s3rver and MinIO, cannot hold one); at least one character.
 * (Its length, at most `MAX_KEY_BYTES` bytes of UTF-8, is checked beside it.)
 */
const KEY_BODY = String.raw`(?!/)(?!.*//)(?!(?:[^/]*/)*\.{1,2}(?:/|$))[^\u0000-\u001f\u007f-\u009f]+`;
export const OBJECT_KEY_PATTERN = new RegExp(`^${KEY_BODY}$`);
/** A listing prefix: empty, or what a key may be. */
export const PREFIX_PATTERN = new RegExp(`^(?:${KEY_BODY})?$`);

// C0 and C1 control characters and DEL: matching them is the point here.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the rule rejects keys containing control characters
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** A UTF-16 surrogate without its pair: a string that is not well-formed Unicode. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether a string is well-formed Unicode (has a UTF-8 form): no lone surrogate, as JSON's `"\ud800"` makes. */
export const wellFormed = (s: string) => !LONE_SURROGATE.test(s);

/** Why an object key breaks the limits, or undefined when it is valid. */
export function objectKeyProblem(key: string): string | undefined {
  if (key.length === 0) return 'must not be empty';
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) return `must be at most ${MAX_KEY_BYTES} bytes of UTF-8`;
  // A lone surrogate (possible in JSON's `\ud800`) has no UTF-8 form: the store could not be asked for it.
  if (!wellFormed(key)) return 'must be well-formed Unicode (a lone surrogate has no UTF-8)';
  if (OBJECT_KEY_PATTERN.test(key)) return undefined;
  if (CONTROL.test(key)) return 'must not contain control characters';
  if (key.startsWith('/')) return 'must not start with "/"';
  if (key.includes('//')) return 'must not contain an empty segment ("//")';
  return 'must not contain "." or ".." path segments';
}

/** Why a list prefix is refused, or undefined: it may be empty; otherwise it obeys the key limits. */
export function prefixProblem(prefix: string): string | undefined {
  if (prefix === '') return undefined;
  const problem = objectKeyProblem(prefix);
  return problem && `prefix ${problem}`;
}

/** A bucket name (`BUCKET_NAME_PATTERN`), checked and documented; a refusal says which rule it breaks. */
export const zBucketName = () =>
  z
    .string()
    .min(3, 'must be 3 to 63 characters long')
    .max(63, { message: 'must be 3 to 63 characters long', abort: true })
    .regex(BUCKET_NAME_PATTERN, {
      error: (issue) => `invalid bucket name: ${bucketNameProblem(String(issue.input))}`,
    });

/**
 * An object key (`OBJECT_KEY_PATTERN`, at most `MAX_KEY_BYTES` bytes of UTF-8), checked and documented
 * (`x-max-utf8-bytes`); a refusal says which rule it breaks.
 */
export const zObjectKey = () =>
  maxUtf8Bytes(
    z
      .string()
      .min(1, 'invalid object key: must not be empty')
      .max(MAX_KEY_BYTES, {
        message: `invalid object key: must be at most ${MAX_KEY_BYTES} bytes of UTF-8`,
        abort: true,
      })
      .regex(OBJECT_KEY_PATTERN, { error: (issue) => `invalid object key: ${objectKeyProblem(String(issue.input))}` })
      .refine(wellFormed, {
        error: (issue) => `invalid object key: ${objectKeyProblem(String(issue.input))}`,
      }),
    MAX_KEY_BYTES,
  );
