/**
 * The keys that sign access tokens. HS256 signs with the shared secret and
 * publishes nothing. EdDSA/ES256/RS256 sign with the configured private key;
 * its public half is recorded in the database at start-up (retiring the
 * previous key) and published as a JWKS together with retired keys whose
 * tokens may still be valid, so the key can be rotated without breaking
 * tokens already issued, across every instance.
 */
import { createPrivateKey, createPublicKey, type KeyObject, randomBytes } from 'node:crypto';
import type { TokenVerifierOptions } from '@gpu/common';
import {
  calculateJwkThumbprint,
  createLocalJWKSet,
  exportJWK,
  type JSONWebKeySet,
  type JWK,
  type JWTPayload,
  type JWTVerifyGetKey,
  SignJWT,
} from 'jose';
import type { Kysely } from 'kysely';
import type { Algorithm } from '../config.ts';
import type { AuthDatabase } from '../db/schema.ts';
import { activateKey, publishedKeys } from '../db/signing-key-repository.ts';
import { generatePrivateKey } from './key-material.ts';

export interface SigningKeysOptions {
  algorithm: Algorithm;
  /** HS256 secret; a random one is made when empty (development only, checked by config). */
  secret: string;
  /** PKCS#8 PEM; a key pair is generated when empty (development only). */
  privateKeyPem: string;
  /** `kid`; the RFC 7638 thumbprint of the public key when empty. */
  keyId: string;
  /** How long a retired key stays in the JWKS: the access-token lifetime plus a margin. */
  retentionMs: number;
  db: Kysely<AuthDatabase>;
}

const KEY_TYPES: Record<Exclude<Algorithm, 'HS256'>, { type: string; check?: (k: KeyObject) => boolean }> = {
  EdDSA: { type: 'ed25519' },
  ES256: { type: 'ec', check: (k) => k.asymmetricKeyDetails?.namedCurve === 'prime256v1' },
  RS256: { type: 'rsa', check: (k) => (k.asymmetricKeyDetails?.modulusLength ?? 0) >= 2048 },
};

const JWKS_REFRESH_MS = 30_000;

export class SigningKeys {
  private jwksCache?: { at: number; set: JSONWebKeySet; getKey: JWTVerifyGetKey };

  private constructor(
    readonly algorithm: Algorithm,
    private readonly signingKey: KeyObject | Uint8Array,
    private readonly kid: string | undefined,
    private readonly opts: SigningKeysOptions,
  ) {}

  /** Loads (or makes) the signing key and, for asymmetric algorithms, records it as the active key. */
  static async create(opts: SigningKeysOptions): Promise<SigningKeys> {
    if (opts.algorithm === 'HS256') {
      const secret = opts.secret || randomBytes(32).toString('base64url');
      return new SigningKeys('HS256', new TextEncoder().encode(secret), undefined, opts);
    }
    const expected = KEY_TYPES[opts.algorithm];
    const privateKey = opts.privateKeyPem ? createPrivateKey(opts.privateKeyPem) : generatePrivateKey(opts.algorithm);
    if (privateKey.asymmetricKeyType !== expected.type || (expected.check && !expected.check(privateKey))) {
      throw new Error(
        `the private key (${privateKey.asymmetricKeyType}) does not fit ${opts.algorithm}: ` +
          'EdDSA needs Ed25519, ES256 an EC P-256 key, RS256 an RSA key of 2048 bits or more',
      );
    }
    const publicJwk = await exportJWK(createPublicKey(privateKey));
    const kid = opts.keyId || (await calculateJwkThumbprint(publicJwk, 'sha256'));
    await opts.db.transaction().execute((trx) =>
      activateKey(trx, {
        kid,
        alg: opts.algorithm,
        publicJwk: { ...publicJwk, kid, alg: opts.algorithm, use: 'sig' },
      }),
    );
    return new SigningKeys(opts.algorithm, privateKey, kid, opts);
  }

  /** Signs a JWT with the active key (`kid` in the header for asymmetric keys). */
  sign(payload: JWTPayload): Promise<string> {
    return new SignJWT(payload)
      .setProtectedHeader({ alg: this.algorithm, typ: 'JWT', ...(this.kid ? { kid: this.kid } : {}) })
      .sign(this.signingKey);
  }

  /** The public keys other services verify with: the active one and retired ones still within retention. */
  async jwks(): Promise<JSONWebKeySet> {
    return (await this.cachedJwks(false)).set;
  }

  /** How this service verifies its own tokens, in the options of @gpu/common's `createTokenVerifier`. */
  verifierKey(): Pick<TokenVerifierOptions, 'secret' | 'getKey' | 'algorithms'> {
    if (this.algorithm === 'HS256') {
      return { secret: new TextDecoder().decode(this.signingKey as Uint8Array), algorithms: ['HS256'] };
    }
    return {
      algorithms: [this.algorithm],
      getKey: async (header, token) => {
        const known = (await this.cachedJwks(false)).set.keys.some((k) => k.kid === header.kid);
        return (await this.cachedJwks(!known)).getKey(header, token);
      },
    };
  }

  private async cachedJwks(force: boolean) {
    const now = Date.now();
    const fresh = this.jwksCache && now - this.jwksCache.at < (force ? 1000 : JWKS_REFRESH_MS);
    if (fresh && this.jwksCache) return this.jwksCache;
    let set: JSONWebKeySet = { keys: [] };
    if (this.algorithm !== 'HS256') {
      const keys = await publishedKeys(this.opts.db, new Date(now - this.opts.retentionMs));
      set = { keys: keys.map((k) => k.publicJwk as JWK) };
    }
    this.jwksCache = { at: now, set, getKey: createLocalJWKSet(set) };
    return this.jwksCache;
  }
}
