/**
 * The document says what the service enforces (`requestSchemaDrift` in `@gpu/common/testing`): every value generated
 * from a documented request field's schema (its bounds and their neighbours, samples of its pattern, awkward text) is
 * refused with a 400 naming the field exactly when the document refuses it. Passwords (no control characters), the
 * token endpoint's `grant_type` (an enum), durations (`grace_period`) and dates among them.
 */
import { requestSchemaDrift } from '@gpu/common/testing';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { bearer, registerAndLogin, testConfig, useAuth } from './helpers.ts';

const ADMIN = { email: 'schema-admin@example.com', password: 'initial admin passphrase' };
const auth = useAuth(testConfig({ admin: ADMIN }));

beforeAll(async () => {
  await ensureInitialAdmin(auth.ctx);
  // A renter too, so that the routes of a user's own (API keys) let the admin in to be answered.
  await auth.db
    .updateTable('users')
    .set({ roles: ['admin', 'renter'] })
    .where('email', '=', ADMIN.email)
    .execute();
});

describe('the request schemas of openapi.json', () => {
  it('refuse exactly what the service refuses, field by field', { timeout: 300_000 }, async () => {
    const login = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN });
    const admin = bearer(login.json().access_token);
    const renter = bearer((await registerAndLogin(auth.app, { roles: ['renter'] })).tokens.access_token);
    const drift = await requestSchemaDrift({
      app: auth.app,
      callers: [admin, renter],
      skipFields: {
        'querystring.cursor': 'opaque: only a cursor a page answered is one (400 INVALID_CURSOR)',
        'POST /api/v1/auth/email/verify body.token': 'opaque: only a token the service mailed is one',
        'POST /api/v1/auth/clients body.owner_id': 'a rule between fields: only a daemon client names an owner',
        'POST /api/v1/auth/keys body.expires_at': 'bounded by the time of the request: it must lie in the future',
        'POST /api/v1/auth/ssh-keys body.public_key':
          'a key only if it parses as one: the document says its form, the service parses it (400 INVALID_SSH_KEY)',
        'DELETE /api/v1/auth/sign-ins querystring.include_current':
          "a value it takes signs the caller's own sign-in out too: the test's callers would be gone for the rest",
      },
    });
    expect(drift).toEqual([]);
  });
});
