/**
 * A configuration file named in the environment that does not exist stops the program's start-up, naming the file,
 * instead of leaving every setting in it at its default without a word: the auth, registry and billing services
 * (`<SERVICE>_CONFIG_FILE`) and the provider daemon (`DAEMON_CONFIG_FILE`). The storage service is the spec's
 * exception ("when the file is absent, a default one is created"): it writes the file with the defaults and starts.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadAuthConfig } from '../services/auth/src/config.ts';
import { loadBillingConfig } from '../services/billing/src/config.ts';
import { loadRegistryConfig } from '../services/provider-registry/src/config.ts';
import { loadStorageConfig } from '../services/storage/src/config.ts';
import { loadDaemonConfig } from '../tools/provider-daemon/src/config.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'config-files-'));

const refusing: [string, string, (env: NodeJS.ProcessEnv) => unknown][] = [
  ['auth', 'AUTH_CONFIG_FILE', loadAuthConfig],
  ['provider-registry', 'REGISTRY_CONFIG_FILE', loadRegistryConfig],
  ['billing', 'BILLING_CONFIG_FILE', loadBillingConfig],
  ['the provider daemon', 'DAEMON_CONFIG_FILE', loadDaemonConfig],
];

describe('a configuration file that does not exist', () => {
  it.each(refusing)('stops %s, naming the file (%s)', (_name, variable, load) => {
    const file = path.join(dir, `mistyped-${variable.toLowerCase()}.yaml`);
    expect(() => load({ [variable]: file })).toThrow(`configuration file ${file} does not exist`);
    expect(existsSync(file)).toBe(false);
  });

  it('stops the provider daemon process with one line and exit status 1, as it does a service', async () => {
    const file = path.join(dir, 'daemon.yaml');
    const daemon = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', 'tools/provider-daemon/src/main.ts'],
      {
        cwd: path.resolve(import.meta.dirname, '..'),
        env: { ...process.env, DAEMON_CONFIG_FILE: file },
        timeout: 60_000,
      },
    ).then(
      () => ({ code: 0, stderr: '' }),
      (err: { code: number; stderr: string }) => err,
    );
    expect(daemon.code).toBe(1);
    expect(daemon.stderr).toMatch(/^[^\n]+\n$/);
    expect(JSON.parse(daemon.stderr)).toMatchObject({
      level: 'fatal',
      msg: `start-up failed: configuration file ${file} does not exist`,
    });
  });

  it('is written with the defaults by the storage service (STORAGE_CONFIG_FILE), as its spec asks', () => {
    const file = path.join(dir, 'storage', 'config.yaml');
    const config = loadStorageConfig({ STORAGE_CONFIG_FILE: file });
    const written = YAML.parse(readFileSync(file, 'utf8'));
    expect(written.server.port).toBe(8001);
    expect(written.object_store.default_bucket).toBe(config.object_store.default_bucket);
  });
});
