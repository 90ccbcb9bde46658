import { createPrivateKey } from 'node:crypto';
import { mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { configWarnings } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import { checkAuthConfig, loadAuthConfig } from '../src/config.ts';
import { mustRequireTls } from '../src/domain/mail/mailer.ts';

const LONG_SECRET = 's'.repeat(32);

describe('configuration', () => {
  it('reads the spec and issue environment names', () => {
    const config = loadAuthConfig({
      DATABASE_URL: 'postgres://u@db:5432/auth',
      SECRET_KEY: LONG_SECRET,
      ALGORITHM: 'ES256',
      ACCESS_TOKEN_EXPIRE_MINUTES: '5',
      REFRESH_TOKEN_EXPIRE: '7d',
      JWT_ISSUER: 'https://auth.example',
      JWT_AUDIENCE: 'gpu-api',
      ADMIN_EMAIL: 'root@example.com',
      ADMIN_PASSWORD: 'initial admin passphrase',
      PORT: '9100',
    });
    expect(config.database.url).toBe('postgres://u@db:5432/auth');
    expect(config.jwt).toMatchObject({
      secret_key: LONG_SECRET,
      algorithm: 'ES256',
      access_token_expire_minutes: 5,
      refresh_token_expire: '7d',
      issuer: 'https://auth.example',
      audience: 'gpu-api',
    });
    expect(config.admin.email).toBe('root@example.com');
    expect(config.server.port).toBe(9100);
    expect(loadAuthConfig({ JWT_SECRET: LONG_SECRET }).jwt.secret_key).toBe(LONG_SECRET);
  });

  it('has the documented defaults', () => {
    const config = loadAuthConfig({});
    expect(config.server.port).toBe(8000);
    expect(config.jwt).toMatchObject({
      algorithm: 'EdDSA',
      access_token_expire_minutes: 15,
      refresh_token_expire: '30d',
    });
    expect(config.password).toMatchObject({
      min_length: 8,
      max_length: 128,
      memory_kib: 19456,
      time_cost: 2,
      parallelism: 1,
    });
    // Failed logins: 10 per account from one source, a ceiling of 100 per account from all (login-guessing.test.ts).
    expect(config.rate_limit.login_per_account_ip).toEqual({ max: 10, windowMs: 15 * 60_000 });
    expect(config.rate_limit.login_per_account).toEqual({ max: 100, windowMs: 15 * 60_000 });
  });

  it('parses rate limits written N/duration and refuses bad ones', () => {
    expect(loadAuthConfig({ AUTH__RATE_LIMIT__LOGIN_PER_IP: '7/30s' }).rate_limit.login_per_ip).toEqual({
      max: 7,
      windowMs: 30_000,
    });
    expect(() => loadAuthConfig({ AUTH__RATE_LIMIT__LOGIN_PER_IP: 'lots' })).toThrow(/rate_limit.login_per_ip/);
  });

  it('keeps the audit trail a day at least, or for ever', () => {
    expect(() => loadAuthConfig({ AUTH__AUDIT__RETENTION: '400s' })).toThrow(/audit.retention.*a day at least/);
    expect(loadAuthConfig({ AUTH__AUDIT__RETENTION: '0s' }).audit.retention).toBe('0s');
    expect(loadAuthConfig({ AUTH__AUDIT__RETENTION: '1d' }).audit.retention).toBe('1d');
    expect(loadAuthConfig({}).audit.retention).toBe('400d');
  });

  it('refuses argon2id parameters below the OWASP minimum and an unknown algorithm', () => {
    expect(() => loadAuthConfig({ AUTH__PASSWORD__MEMORY_KIB: '4096' })).toThrow(/password.memory_kib/);
    expect(() => loadAuthConfig({ ALGORITHM: 'none' })).toThrow(/jwt.algorithm/);
    expect(() => loadAuthConfig({ AUTH__PASSWORD__MAX_LENGTH: '32' })).toThrow(/password.max_length/);
  });

  it('refuses to run in production with a missing or short secret, or without a private key', () => {
    const prod = (env: Record<string, string>) =>
      checkAuthConfig(loadAuthConfig({ APP_ENV: 'production', SMTP_URL: 'smtp://mail:25', ...env }));
    expect(() => prod({ ALGORITHM: 'HS256' })).toThrow(/SECRET_KEY.*not set/);
    expect(() => prod({ ALGORITHM: 'HS256', SECRET_KEY: 'short' })).toThrow(/shorter than 32/);
    expect(() => prod({})).toThrow(/JWT_PRIVATE_KEY/);
    expect(prod({ ALGORITHM: 'HS256', SECRET_KEY: LONG_SECRET })).toEqual([]);
    // The examples' placeholder admin password passes the password policy: production refuses it by name.
    const admin = { ALGORITHM: 'HS256', SECRET_KEY: LONG_SECRET, ADMIN_EMAIL: 'admin@example.com' };
    expect(() => prod({ ...admin, ADMIN_PASSWORD: 'change-me-admin-password' })).toThrow(/ADMIN_PASSWORD.*placeholder/);
    expect(prod({ ...admin, ADMIN_PASSWORD: 'a-real-long-passphrase-of-ours' })).toEqual([]);
    expect(() => checkAuthConfig(loadAuthConfig({ NODE_ENV: 'production', ALGORITHM: 'HS256' }))).toThrow(/SECRET_KEY/);
  });

  it('only warns outside production', () => {
    const warnings = checkAuthConfig(
      loadAuthConfig({ ALGORITHM: 'HS256', SECRET_KEY: 'short', SMTP_URL: 'smtp://mail:25' }),
    );
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/refused in production/);
  });

  it('warns without an SMTP server, and refuses what is no SMTP URL or a link without its {token}', () => {
    expect(checkAuthConfig(loadAuthConfig({ SECRET_KEY: LONG_SECRET, ALGORITHM: 'HS256' }))).toEqual([
      expect.stringMatching(/SMTP_URL .* no mail is sent/),
    ]);
    expect(() => checkAuthConfig(loadAuthConfig({ SMTP_URL: 'mail.example.com:25' }))).toThrow(/smtp:\/\//);
    // Production refuses to run without mail: verified addresses (needed to move money out) could never be had.
    expect(() =>
      checkAuthConfig(loadAuthConfig({ APP_ENV: 'production', ALGORITHM: 'HS256', SECRET_KEY: LONG_SECRET })),
    ).toThrow(/SMTP_URL/);
    expect(() =>
      checkAuthConfig(loadAuthConfig({ SMTP_URL: 'smtp://mail:25', AUTH__MAIL__RESET_URL: 'https://app/reset' })),
    ).toThrow(/mail.reset_url must contain \{token\}/);
    // The code in a query string would reach the page's server logs and the Referer of what it loads.
    expect(() =>
      checkAuthConfig(
        loadAuthConfig({ SMTP_URL: 'smtp://mail:25', AUTH__MAIL__RESET_URL: 'https://app/reset?token={token}' }),
      ),
    ).toThrow(/fragment/);
    expect(() =>
      checkAuthConfig(
        loadAuthConfig({ SMTP_URL: 'smtp://mail:25', AUTH__MAIL__VERIFY_URL: 'https://app/verify#token={token}' }),
      ),
    ).not.toThrow();
  });

  it('sends mail to another machine over smtp:// only after STARTTLS, unless the URL says otherwise', () => {
    expect(mustRequireTls('smtp://user:secret@mail.example.com:587')).toBe(true);
    expect(mustRequireTls('smtp://10.0.0.5:25')).toBe(true);
    // TLS from the start; this machine; a URL that decides (a catcher on a private network).
    expect(mustRequireTls('smtps://user:secret@mail.example.com:465')).toBe(false);
    expect(mustRequireTls('smtp://127.0.0.1:2525')).toBe(false);
    expect(mustRequireTls('smtp://localhost:2525')).toBe(false);
    expect(mustRequireTls('smtp://mailpit:1025?requireTLS=false')).toBe(false);
  });

  it('wants ADMIN_EMAIL and ADMIN_PASSWORD together', () => {
    expect(() => checkAuthConfig(loadAuthConfig({ ADMIN_EMAIL: 'root@example.com' }))).toThrow(/ADMIN_PASSWORD/);
  });

  it('reads the private key from JWT_PRIVATE_KEY_FILE and names a missing file', () => {
    expect(() =>
      loadAuthConfig({ APP_ENV: 'production', ALGORITHM: 'EdDSA', JWT_PRIVATE_KEY_FILE: '/nonexistent/key.pem' }),
    ).toThrow(/JWT_PRIVATE_KEY_FILE/);
  });

  it('makes the key file at the first start of a development setup, keeps it private and reuses it', () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'auth-key-')), 'keys', 'signing-key.pem');
    const first = loadAuthConfig({ JWT_PRIVATE_KEY_FILE: file, SMTP_URL: 'smtp://mail:25' });
    expect(first.jwt.private_key).toContain('BEGIN PRIVATE KEY');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(createPrivateKey(first.jwt.private_key).asymmetricKeyType).toBe('ed25519');
    expect(loadAuthConfig({ JWT_PRIVATE_KEY_FILE: file }).jwt.private_key).toBe(first.jwt.private_key);
    expect(checkAuthConfig(first)).toEqual([]);
  });

  it('reads old key names with a deprecation warning, and the shared database section', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'auth-config-'));
    const file = path.join(dir, 'old.yaml');
    writeFileSync(file, 'database_url: postgres://u@db:5432/auth\njwt:\n  secretKey: from-the-file\n');
    const config = loadAuthConfig({ AUTH_CONFIG_FILE: file });
    expect(config.database.url).toBe('postgres://u@db:5432/auth');
    expect(config.jwt.secret_key).toBe('from-the-file');
    expect(configWarnings(config)).toEqual([
      `configuration key database_url (file ${file}) is deprecated: use database.url; the old name goes in a later release`,
      `configuration key jwt.secretKey (file ${file}) is deprecated: use jwt.secret_key; the old name goes in a later release`,
    ]);

    const fromEnv = loadAuthConfig({ AUTH__DATABASE_URL: 'postgres://u@env/auth' });
    expect(fromEnv.database.url).toBe('postgres://u@env/auth');
    expect(configWarnings(fromEnv)).toHaveLength(1);
    expect(configWarnings(fromEnv)[0]).toContain('AUTH__DATABASE_URL');

    const current = loadAuthConfig({ DATABASE_URL: 'postgres://u@db/auth', AUTH__DATABASE__CONNECT_TIMEOUT: '2s' });
    expect(current.database).toMatchObject({ url: 'postgres://u@db/auth', connect_timeout: '2s', pool_size: 10 });
    expect(configWarnings(current)).toEqual([]);
  });
});
