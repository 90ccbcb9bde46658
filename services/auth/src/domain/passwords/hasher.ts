/**
 * argon2id password hashing. Hashes carry their parameters (PHC string), so a
 * login can tell when a hash was made with weaker parameters than configured
 * and rehash it. A dummy hash with the current parameters is verified for
 * unknown emails, so their login takes as long as a wrong password.
 */
import argon2 from 'argon2';

export interface Argon2Params {
  memoryKib: number;
  timeCost: number;
  parallelism: number;
}

export class PasswordHasher {
  private dummyHash?: Promise<string>;

  constructor(private readonly params: Argon2Params) {}

  private get options() {
    return {
      type: argon2.argon2id as typeof argon2.argon2id,
      memoryCost: this.params.memoryKib,
      timeCost: this.params.timeCost,
      parallelism: this.params.parallelism,
    };
  }

  hash(password: string): Promise<string> {
    return argon2.hash(password, this.options);
  }

  /** Whether `password` matches `hash`; a malformed hash never matches. */
  async verify(hash: string, password: string): Promise<boolean> {
    try {
      return await argon2.verify(hash, password);
    } catch {
      return false;
    }
  }

  /** Spends the time of one verification without any account, so unknown emails cost as much as known ones. */
  async verifyDummy(password: string): Promise<void> {
    this.dummyHash ??= this.hash('dummy password for unknown accounts');
    await this.verify(await this.dummyHash, password);
  }

  /** Whether the hash was made with other parameters or algorithm than the configured ones. */
  needsRehash(hash: string): boolean {
    if (!hash.startsWith('$argon2id$')) return true;
    return argon2.needsRehash(hash, this.options);
  }
}
