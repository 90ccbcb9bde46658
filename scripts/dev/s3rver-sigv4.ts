/**
 * Signature Version 4 in front of s3rver, so that the embedded store refuses what S3 refuses. s3rver 3.7 checks
 * only the old V2 signatures: a V4 request passed whatever its signature, so a presigned GET URL also overwrote
 * (PUT) and deleted (DELETE) its object, and an unsigned GET read any object.
 *
 * Every request but a CORS preflight (OPTIONS) must now be signed:
 * - with an `Authorization: AWS4-HMAC-SHA256 ...` header (the SDKs, `curl --aws-sigv4`): the date (`X-Amz-Date`)
 *   within 15 minutes of the server's clock, and the signature over method, path, query, the signed headers and the
 *   declared payload hash (`X-Amz-Content-Sha256`, which must be present);
 * - or as a presigned URL (`X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=...&X-Amz-Signature=...`): not
 *   expired (`X-Amz-Date` + `X-Amz-Expires`, at most 7 days), and the signature over the same parts, so the URL
 *   works for the method it was made for only.
 * The signature is recomputed with the AWS SDK's own signer (`@smithy/signature-v4`: its canonical request, string
 * to sign and key derivation) from the secret of the access key the credential names (s3rver's accounts), and
 * compared in constant time. V2 signatures are left to s3rver, which checks them.
 *
 * Not checked, as elsewhere in this dev store: that the body's bytes match a declared SHA-256 (S3 does check it;
 * the storage service signs uploads as UNSIGNED-PAYLOAD), and aws-chunked bodies' per-chunk signatures.
 * With `allowAnonymous` (the benchmarks' reference relay reads without signing), requests that carry no signature
 * pass as before; signed ones are still checked.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { createRequire } from 'node:module';
import {
  ALGORITHM_IDENTIFIER,
  createScope,
  getCanonicalHeaders,
  getSigningKey,
  SignatureV4,
  UNSIGNED_PAYLOAD,
} from '@smithy/signature-v4';
import type S3rver from 's3rver';
import { addMiddleware, s3Error } from './s3rver-koa.ts';

/** Largest skew between a header-signed request's date and the server's clock, as S3 allows. */
const MAX_SKEW_MS = 15 * 60 * 1000;
/** Longest validity of a presigned URL (7 days), as S3 allows. */
const MAX_EXPIRES_S = 7 * 24 * 3600;

type SourceData = string | ArrayBuffer | ArrayBufferView;
const bytes = (data: SourceData): Buffer =>
  typeof data === 'string'
    ? Buffer.from(data, 'utf8')
    : ArrayBuffer.isView(data)
      ? Buffer.from(data.buffer, data.byteOffset, data.byteLength)
      : Buffer.from(data);

/** SHA-256 (HMAC-SHA-256 with a secret) over node:crypto, in the shape the signer takes. */
export class Sha256 {
  private readonly hash;
  constructor(secret?: SourceData) {
    this.hash = secret === undefined ? createHash('sha256') : createHmac('sha256', bytes(secret));
  }
  update(data: Uint8Array): void {
    this.hash.update(data);
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.hash.digest());
  }
}

/** The SDK's signer, opened up for its canonical request and string to sign (both protected). */
class Verifier extends SignatureV4 {
  constructor() {
    // Region and credentials come from each request's credential scope; S3 paths are signed as sent.
    super({
      service: 's3',
      region: 'us-east-1',
      credentials: { accessKeyId: '', secretAccessKey: '' },
      sha256: Sha256,
      uriEscapePath: false,
    });
  }

  /** The hex signature of a request as signed by `accessKeyId`/`secret` within `scope` at `longDate`. */
  async expected(req: SignedParts, secret: string): Promise<string> {
    const request = {
      method: req.method,
      headers: req.headers,
      protocol: 'http:',
      hostname: '',
      path: req.path,
      query: req.query,
    };
    // Every header named in SignedHeaders counts, even those the SDK itself never signs (user-agent, ...).
    const canonicalHeaders = getCanonicalHeaders(request, undefined, new Set(Object.keys(req.headers)));
    const canonical = this.createCanonicalRequest(request, canonicalHeaders, req.payloadHash);
    const scope = createScope(req.shortDate, req.region, req.service);
    const toSign = await this.createStringToSign(req.longDate, scope, canonical, ALGORITHM_IDENTIFIER);
    const key = await getSigningKey(
      Sha256,
      { accessKeyId: req.accessKeyId, secretAccessKey: secret },
      req.shortDate,
      req.region,
      req.service,
    );
    const mac = new Sha256(key);
    mac.update(bytes(toSign));
    return Buffer.from(await mac.digest()).toString('hex');
  }
}

const verifier = new Verifier();

interface SignedParts {
  method: string;
  path: string;
  query: Record<string, string | string[]>;
  /** The signed headers only, by lowercase name. */
  headers: Record<string, string>;
  payloadHash: string;
  accessKeyId: string;
  longDate: string;
  shortDate: string;
  region: string;
  service: string;
  signature: string;
}

/** A refusal, answered as S3 answers: an XML error body. */
class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
const denied = (message: string) => new Refusal(403, 'AccessDenied', message);
const mismatch = () =>
  new Refusal(
    403,
    'SignatureDoesNotMatch',
    'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
  );

/** The query as the signer takes it: names and values percent-decoded (`+` as a space, as s3rver reads it). */
function parseQuery(raw: string): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = {};
  for (const pair of raw.split('&')) {
    if (pair === '') continue;
    const at = pair.indexOf('=');
    let name: string;
    let value: string;
    try {
      const decode = (s: string) => decodeURIComponent(s.replace(/\+/g, ' '));
      name = decode(at === -1 ? pair : pair.slice(0, at));
      value = at === -1 ? '' : decode(pair.slice(at + 1));
    } catch {
      throw new Refusal(400, 'InvalidArgument', 'malformed percent-encoding in the query string');
    }
    const seen = query[name];
    query[name] = seen === undefined ? value : [...(Array.isArray(seen) ? seen : [seen]), value];
  }
  return query;
}

/** `AKID/20261123/us-east-1/s3/aws4_request` */
function parseCredential(credential: string) {
  const [accessKeyId, shortDate, region, service, terminator, ...rest] = credential.split('/');
  if (!accessKeyId || !shortDate || !region || !service || terminator !== 'aws4_request' || rest.length > 0) {
    throw new Refusal(400, 'AuthorizationHeaderMalformed', `malformed credential: ${credential}`);
  }
  return { accessKeyId, shortDate, region, service };
}

/** `20261123T105850Z` as a time, or NaN. */
function parseLongDate(value: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  return m ? Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!) : Number.NaN;
}

/** The signed headers' values, by name; a signed header the request lacks cannot match. */
function signedHeaders(names: string, headers: Record<string, string | string[] | undefined>) {
  const picked: Record<string, string> = {};
  const list = names.split(';').filter(Boolean);
  if (!list.includes('host')) throw denied('the host header must be signed');
  for (const name of list) {
    const value = headers[name];
    if (value === undefined) throw mismatch();
    picked[name] = Array.isArray(value) ? value.join(',') : value;
  }
  return picked;
}

interface Request {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
}

const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** What a header-signed request claims, checked for form and date. */
function headerSigned(req: Request, authorization: string, path: string, query: SignedParts['query']): SignedParts {
  const m = /^AWS4-HMAC-SHA256 +Credential=([^, ]+), *SignedHeaders=([^, ]+), *Signature=([0-9a-f]{64})$/.exec(
    authorization.trim(),
  );
  if (!m) throw new Refusal(400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed.');
  const longDate = first(req.headers['x-amz-date']) ?? '';
  const time = parseLongDate(longDate);
  if (Number.isNaN(time)) throw denied('AWS authentication requires a valid X-Amz-Date header');
  if (Math.abs(Date.now() - time) > MAX_SKEW_MS) {
    throw new Refusal(
      403,
      'RequestTimeTooSkewed',
      'The difference between the request time and the current time is too large.',
    );
  }
  const payloadHash = first(req.headers['x-amz-content-sha256']);
  if (payloadHash === undefined) {
    throw new Refusal(400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256');
  }
  const credential = parseCredential(m[1]!);
  if (credential.shortDate !== longDate.slice(0, 8)) throw mismatch();
  return {
    method: req.method,
    path,
    query,
    headers: signedHeaders(m[2]!, req.headers),
    payloadHash,
    longDate,
    ...credential,
    signature: m[3]!,
  };
}

/** What a presigned URL claims, checked for form and expiry. */
function presigned(req: Request, path: string, query: SignedParts['query']): SignedParts {
  const param = (name: string) => {
    const v = query[name];
    if (typeof v !== 'string') {
      throw new Refusal(
        400,
        'AuthorizationQueryParametersError',
        `Query-string authentication version 4 requires one ${name} parameter.`,
      );
    }
    return v;
  };
  if (param('X-Amz-Algorithm') !== ALGORITHM_IDENTIFIER) {
    throw new Refusal(400, 'AuthorizationQueryParametersError', 'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"');
  }
  const longDate = param('X-Amz-Date');
  const time = parseLongDate(longDate);
  const expires = Number(param('X-Amz-Expires'));
  if (Number.isNaN(time) || !Number.isInteger(expires) || expires < 1 || expires > MAX_EXPIRES_S) {
    throw new Refusal(
      400,
      'AuthorizationQueryParametersError',
      'X-Amz-Date must be yyyyMMddTHHmmssZ and X-Amz-Expires 1 to 604800 seconds',
    );
  }
  const now = Date.now();
  if (now > time + expires * 1000) throw denied('Request has expired');
  if (time - now > MAX_SKEW_MS) throw denied('Request is not valid yet');
  const signature = param('X-Amz-Signature');
  const credential = parseCredential(param('X-Amz-Credential'));
  if (credential.shortDate !== longDate.slice(0, 8)) throw mismatch();
  const declared = query['X-Amz-Content-Sha256'];
  return {
    method: req.method,
    path,
    query,
    headers: signedHeaders(param('X-Amz-SignedHeaders'), req.headers),
    payloadHash: typeof declared === 'string' ? declared : UNSIGNED_PAYLOAD,
    longDate,
    ...credential,
    signature,
  };
}

/**
 * Checks one request. Resolves when it may go on to s3rver (V4-signed correctly, V2-signed for s3rver to check,
 * a CORS preflight, or unsigned where `allowAnonymous`); rejects with a Refusal otherwise.
 */
export async function verifyRequest(
  req: Request,
  secretOf: (accessKeyId: string) => string | undefined,
  allowAnonymous = false,
): Promise<void> {
  if (req.method === 'OPTIONS') return;
  const q = req.url.indexOf('?');
  const path = q === -1 ? req.url : req.url.slice(0, q);
  const query = parseQuery(q === -1 ? '' : req.url.slice(q + 1));
  const authorization = first(req.headers.authorization);
  const byHeader = authorization !== undefined;
  const byQuery = 'X-Amz-Algorithm' in query;
  if (byHeader && byQuery) {
    throw new Refusal(400, 'InvalidArgument', 'Only one auth mechanism allowed');
  }
  // The older V2 signatures (`Authorization: AWS key:signature`, `?Signature=`): s3rver checks those itself.
  if ((byHeader && /^AWS /.test(authorization)) || (!byHeader && !byQuery && 'Signature' in query)) return;
  if (!byHeader && !byQuery) {
    if (allowAnonymous) return;
    throw denied('Anonymous access is not allowed: sign the request (AWS Signature Version 4) or use a presigned URL');
  }
  const parts = byHeader ? headerSigned(req, authorization, path, query) : presigned(req, path, query);
  const secret = secretOf(parts.accessKeyId);
  if (secret === undefined) {
    throw new Refusal(403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.');
  }
  const expected = Buffer.from(await verifier.expected(parts, secret), 'hex');
  const given = Buffer.from(parts.signature, 'hex');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw mismatch();
}

interface KoaContext extends Request {
  status: number;
  type: string;
  body: unknown;
  set(name: string, value: string): void;
}

interface Accounts {
  registry: Map<string, { accessKeys: Map<string, string> }>;
}

/** s3rver's accounts (by default one: `S3RVER` / `S3RVER`). */
const accounts = createRequire(import.meta.url)('s3rver/lib/models/account.js') as Accounts;

/** The secret of an access key among s3rver's accounts. */
function s3rverSecret(accessKeyId: string): string | undefined {
  return accounts.registry.get(accessKeyId)?.accessKeys.get(accessKeyId);
}

/** Puts the check in front of an s3rver instance's routes (right after its request logger). */
export function addSignatureV4(server: S3rver, options: { allowAnonymous?: boolean } = {}): void {
  const middleware = async (ctx: KoaContext, next: () => Promise<void>) => {
    try {
      await verifyRequest(ctx, s3rverSecret, options.allowAnonymous);
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      return s3Error(ctx, err.status, err.code, err.message);
    }
    return next();
  };
  addMiddleware(server, middleware);
}
