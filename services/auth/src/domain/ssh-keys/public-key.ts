/**
 * What an SSH public key a user registers must be: one OpenSSH public-key line, `<type> <base64 data> [comment]`, as
 * `ssh-keygen` writes it to `id_ed25519.pub`, of a type OpenSSH accepts by default and that is still strong. The key
 * itself is read by `ssh2`'s parser (`utils.parseKey`); this module only says which of its answers are taken.
 *
 * - Types: `ssh-ed25519`, `ecdsa-sha2-nistp256`, `-nistp384`, `-nistp521`, and `ssh-rsa` of at least 2048 bits.
 *   DSA (`ssh-dss`, refused by OpenSSH since 7.0), security-key (`sk-…`) and certificate types are refused:
 *   `SSH_KEY_TYPE_NOT_ALLOWED`; an RSA key under 2048 bits: `SSH_KEY_TOO_SHORT`.
 * - A private key pasted by mistake is refused without being read further (`SSH_KEY_IS_PRIVATE`); nothing of it is
 *   kept or logged.
 * - Anything else that is not exactly one key is `INVALID_SSH_KEY`: several lines, `authorized_keys` options before
 *   the key (`command="…"`, `from=…`: the platform decides how a key is used), data that does not parse, data of
 *   another type than the line names, trailing bytes after the key, a key OpenSSL does not take, or data not in the
 *   one form `ssh-keygen` writes (`keyData`).
 * - The fingerprint is `ssh-keygen -lf`'s: `SHA256:` and the unpadded base64 of the SHA-256 of the key's data.
 */
import { createHash, createPublicKey, type JsonWebKey, type KeyObject } from 'node:crypto';
import { isAppError } from '@gpu/common';
import ssh2 from 'ssh2';
import { authErrors } from '../../errors.ts';

/** The key types taken, as OpenSSH names them. */
export const SSH_KEY_TYPES = [
  'ssh-ed25519',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'ssh-rsa',
] as const;
type SshKeyType = (typeof SSH_KEY_TYPES)[number];

/** The smallest RSA modulus taken (NIST SP 800-57's floor; `ssh-keygen`'s default is 3072). */
export const MIN_RSA_BITS = 2048;
/** The longest key line taken: an RSA key of 16384 bits (OpenSSH's largest) is about 2,800 characters. */
export const MAX_PUBLIC_KEY_LENGTH = 8192;
/** The longest name; a longer comment is cut to it. */
export const MAX_SSH_KEY_NAME_LENGTH = 100;

/** One key, as it is kept and shown. */
interface PublicKey {
  type: SshKeyType;
  /** `<type> <base64 data>`: the key as an `authorized_keys` line takes it, without the comment. */
  publicKey: string;
  fingerprint: string;
  /** The line's comment (`me@laptop`), empty when it has none. */
  comment: string;
}

const isTaken = (type: string): type is SshKeyType => (SSH_KEY_TYPES as readonly string[]).includes(type);
/** What an OpenSSH key type looks like (`ssh-…`, `ecdsa-…`, `sk-…`, with `@openssh.com` suffixes): to tell options. */
const LOOKS_LIKE_TYPE = /^(ssh-|ecdsa-|sk-)[a-z0-9@.-]+$/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f]/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

const invalid = (detail: string) => authErrors.sshKeyRefused('INVALID_SSH_KEY', detail);

/** Reads one OpenSSH public-key line; a 400 problem saying why for anything else. */
export function parsePublicKey(text: string): PublicKey {
  const line = text.trim();
  if (/PRIVATE KEY|PuTTY-User-Key-File/.test(line)) {
    throw authErrors.sshKeyRefused(
      'SSH_KEY_IS_PRIVATE',
      'this is a private key: never send it anywhere; send its public half (the .pub file, `ssh-keygen -y -f <key>`)',
    );
  }
  if (CONTROL.test(line)) throw invalid('one public key on one line, without control characters');
  const [type = '', data = '', ...rest] = line.split(/[ \t]+/);
  if (!LOOKS_LIKE_TYPE.test(type)) {
    throw invalid(
      rest.some((word) => LOOKS_LIKE_TYPE.test(word)) || LOOKS_LIKE_TYPE.test(data)
        ? 'options before the key (command=, from=, no-pty ...) are not taken: send the key alone, `<type> <data> [comment]`'
        : 'not an OpenSSH public key: send one line as `ssh-keygen` writes it, `<type> <data> [comment]`',
    );
  }
  if (!isTaken(type)) {
    throw authErrors.sshKeyRefused(
      'SSH_KEY_TYPE_NOT_ALLOWED',
      `${type} keys are not taken${type === 'ssh-dss' ? ' (DSA is weak; OpenSSH refuses it since 7.0)' : ''}: ` +
        `use ${SSH_KEY_TYPES.join(', ')} (make one with \`ssh-keygen -t ed25519\`)`,
    );
  }
  if (!BASE64.test(data)) throw invalid(`the key's data is not base64`);
  const { blob, key } = keyData(type, data);
  if (type === 'ssh-rsa') {
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS) {
      throw authErrors.sshKeyRefused(
        'SSH_KEY_TOO_SHORT',
        `this RSA key has ${bits} bits, fewer than ${MIN_RSA_BITS}: make a new key (\`ssh-keygen -t ed25519\`)`,
      );
    }
  }
  return {
    type,
    publicKey: `${type} ${blob.toString('base64')}`,
    fingerprint: fingerprintOf(blob),
    comment: rest.join(' '),
  };
}

/**
 * The key's data, checked: one key of the line's type that the parser reads and OpenSSL takes (an ECDSA point on its
 * curve, an RSA key of sane numbers), written in its one canonical form (`ssh-keygen` writes no other: no padded
 * integer, no compressed point), so that one key has one fingerprint. Throws the 400 problem otherwise; the parsers'
 * own exceptions on hostile data (ssh2's asn1 asserts) included.
 */
function keyData(type: SshKeyType, data: string): { blob: Buffer; key: KeyObject } {
  let blob: Buffer;
  let key: KeyObject;
  let canonical: Buffer;
  try {
    const parsed = ssh2.utils.parseKey(`${type} ${data}`);
    if (parsed instanceof Error || Array.isArray(parsed) || parsed.isPrivateKey()) {
      throw invalid(`not a valid ${type} key${parsed instanceof Error ? ` (${parsed.message})` : ''}`);
    }
    blob = parsed.getPublicSSH();
    // The parser reads one key from the front of the data: anything after it, or another type inside, is not this key.
    if (parsed.type !== type || blob.toString('base64').replace(/=+$/, '') !== data.replace(/=+$/, '')) {
      throw invalid(`the data is not exactly one ${type} key`);
    }
    key = createPublicKey(parsed.getPublicPEM());
    canonical = canonicalBlob(type, key.export({ format: 'jwk' }));
  } catch (err) {
    if (isAppError(err)) throw err;
    throw invalid(`not a valid ${type} key`);
  }
  if (!canonical.equals(blob)) throw invalid(`the ${type} key is not written as ssh-keygen writes it`);
  return { blob, key };
}

/** An SSH wire string: its length (4 bytes, big-endian), then its bytes. */
function wireString(bytes: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

/** An SSH mpint of a positive number's big-endian bytes: no leading zero byte but one that keeps it positive. */
function mpint(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  const trimmed = bytes.subarray(start);
  return wireString((trimmed[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), trimmed]) : trimmed);
}

const CURVES: Record<string, string> = { 'P-256': 'nistp256', 'P-384': 'nistp384', 'P-521': 'nistp521' };

/** The key's data as `ssh-keygen` writes it, from the key as OpenSSL read it. */
function canonicalBlob(type: SshKeyType, jwk: JsonWebKey): Buffer {
  const bytes = (value: string | undefined) => Buffer.from(value ?? '', 'base64url');
  const head = wireString(Buffer.from(type));
  if (type === 'ssh-rsa') return Buffer.concat([head, mpint(bytes(jwk.e)), mpint(bytes(jwk.n))]);
  if (type === 'ssh-ed25519') return Buffer.concat([head, wireString(bytes(jwk.x))]);
  const curve = CURVES[jwk.crv ?? ''] ?? '';
  const point = Buffer.concat([Buffer.from([4]), bytes(jwk.x), bytes(jwk.y)]);
  return Buffer.concat([head, wireString(Buffer.from(curve)), wireString(point)]);
}

/** `ssh-keygen -lf`'s fingerprint of a key's data (the SSH wire form of the public key). */
function fingerprintOf(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}
