/**
 * SSH keys: the OpenSSH public keys users register to reach what they rent (ssh-keys.ts), and what such a key must
 * be (public-key.ts).
 */
export { MAX_PUBLIC_KEY_LENGTH, MAX_SSH_KEY_NAME_LENGTH, MIN_RSA_BITS, SSH_KEY_TYPES } from './public-key.ts';
export {
  addSshKey,
  listOwnSshKeys,
  listUserSshKeys,
  MAX_SSH_KEYS_PER_USER,
  removeSshKey,
  type SshKey,
} from './ssh-keys.ts';
