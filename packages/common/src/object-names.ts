/**
 * Bucket names by S3's rules and object keys by its limits, for every party that names an object: the storage service
 * refuses a name or key that breaks them before any call to the store (its routes name the request field), and a
 * workload's spec (its inputs, its output prefix) is checked by the same rules wherever it is read.
 */

const BUCKET_CHARS = /^[a-z0-9][a-z0-9.-]*[a-z0-9]$/;
const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;
const RESERVED_PREFIXES = ['xn--', 'sthree-', 'amzn-s3-demo-'];
const RESERVED_SUFFIXES = ['-s3alias', '--ol-s3', '.mrap', '--x-s3', '--table-s3'];

/** Why a bucket name breaks S3's naming rules, or undefined when it is valid. */
export function bucketNameProblem(name: string): string | undefined {
  if (name.length < 3 || name.length > 63) return 'must be 3 to 63 characters long';
  if (!BUCKET_CHARS.test(name)) {
    return 'must use lowercase letters, digits, dots and hyphens, and begin and end with a letter or digit';
  }
  if (name.includes('..')) return 'must not contain two adjacent dots';
  if (IPV4.test(name)) return 'must not be formatted as an IP address';
  if (RESERVED_PREFIXES.some((p) => name.startsWith(p))) return 'must not start with a reserved prefix';
  if (RESERVED_SUFFIXES.some((s) => name.endsWith(s))) return 'must not end with a reserved suffix';
  return undefined;
}

// C0 and C1 control characters and DEL: matching them is the point here.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the rule rejects keys containing control characters
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** Why an object key breaks the limits, or undefined when it is valid. */
export function objectKeyProblem(key: string): string | undefined {
  if (key.length === 0) return 'must not be empty';
  if (Buffer.byteLength(key, 'utf8') > 1024) return 'must be at most 1024 bytes of UTF-8';
  if (CONTROL.test(key)) return 'must not contain control characters';
  if (key.split('/').some((segment) => segment === '..' || segment === '.')) {
    return 'must not contain "." or ".." path segments';
  }
  if (key.startsWith('/')) return 'must not start with "/"';
  return undefined;
}

/** Why a list prefix is refused, or undefined: it may be empty; otherwise it obeys the key limits. */
export function prefixProblem(prefix: string): string | undefined {
  if (prefix === '') return undefined;
  const problem = objectKeyProblem(prefix);
  return problem && `prefix ${problem}`;
}
