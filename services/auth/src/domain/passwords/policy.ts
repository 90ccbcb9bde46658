/**
 * The password policy, after NIST SP 800-63B: a minimum length (8 or more), a
 * maximum of at least 64, no composition rules, and no password from the
 * blocklist of common and breached passwords or made of the account's email.
 * Length counts Unicode code points after NFKC normalisation.
 */
import { authErrors } from '../../errors.ts';

export interface PasswordPolicyOptions {
  minLength: number;
  maxLength: number;
  blocklist: ReadonlySet<string>;
}

/** The form a password is hashed and verified in (NFKC, so equivalent spellings match). */
export function normalisePassword(password: string): string {
  return password.normalize('NFKC');
}

export class PasswordPolicy {
  constructor(private readonly opts: PasswordPolicyOptions) {}

  /** Throws a 400 naming the first failed rule (`PASSWORD_TOO_SHORT`, `..._TOO_LONG`, `..._COMMON`, `..._CONTAINS_EMAIL`). */
  check(password: string, email: string): void {
    const normalised = normalisePassword(password);
    const length = [...normalised].length;
    if (length < this.opts.minLength) {
      throw authErrors.weakPassword(
        'PASSWORD_TOO_SHORT',
        `password must be at least ${this.opts.minLength} characters long (it has ${length})`,
      );
    }
    if (length > this.opts.maxLength) {
      throw authErrors.weakPassword(
        'PASSWORD_TOO_LONG',
        `password must be at most ${this.opts.maxLength} characters long (it has ${length})`,
      );
    }
    const lower = normalised.toLowerCase();
    if (this.opts.blocklist.has(lower)) {
      throw authErrors.weakPassword(
        'PASSWORD_COMMON',
        'password is on the list of common or breached passwords; choose another',
      );
    }
    const local = email.split('@')[0] ?? '';
    if (lower === email || (local.length >= 4 && lower === local)) {
      throw authErrors.weakPassword(
        'PASSWORD_CONTAINS_EMAIL',
        'password must not be the email address or its name part',
      );
    }
  }
}
