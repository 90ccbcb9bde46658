/** Making signing key pairs: for a development key file written at first start, and ephemeral test keys. */
import { generateKeyPairSync, type KeyObject } from 'node:crypto';

export type AsymmetricAlgorithm = 'EdDSA' | 'ES256' | 'RS256';

export function generatePrivateKey(alg: AsymmetricAlgorithm): KeyObject {
  if (alg === 'EdDSA') return generateKeyPairSync('ed25519').privateKey;
  if (alg === 'ES256') return generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
  return generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
}

/** A new private key as PKCS#8 PEM. */
export function generatePrivateKeyPem(alg: AsymmetricAlgorithm): string {
  return generatePrivateKey(alg).export({ type: 'pkcs8', format: 'pem' }) as string;
}
