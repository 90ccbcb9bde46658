export { loadBlocklist } from './common-passwords.ts';
export { PasswordHasher } from './hasher.ts';
export { normalisePassword, PasswordPolicy } from './policy.ts';
