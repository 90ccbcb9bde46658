/** Emails are compared case-insensitively: stored and looked up in one normal form. */

/** Trimmed, Unicode NFC, lower-case. */
export function normaliseEmail(email: string): string {
  return email.trim().normalize('NFC').toLowerCase();
}
