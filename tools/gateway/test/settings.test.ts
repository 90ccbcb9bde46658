/**
 * The Node gateway's own settings (src/server.ts): a value that is not what its name says stops it at start-up, naming
 * the setting, rather than running on something else (a blank PORT was port 0: any free port).
 */
import { fileURLToPath } from 'node:url';
import { freePort, spawnServer } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';

const cwd = fileURLToPath(new URL('..', import.meta.url));

/**
 * The gateway's exit code and output with `settings`; one still running after 45 s is stopped (null), within the
 * test's minute.
 */
async function refused(settings: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const env = { ...process.env, PORT: String(await freePort()), HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...settings };
  const gateway = spawnServer('src/server.ts', { cwd, env });
  const deadline = setTimeout(() => gateway.child.kill('SIGKILL'), 45_000);
  const { code } = await gateway.exited;
  clearTimeout(deadline);
  return { code, output: gateway.output() };
}

describe('the gateway refuses settings that do not say what they mean', () => {
  it.each([
    [{ PORT: ' ' }, 'PORT: " " is not a port number'],
    [{ PORT: '70000' }, 'PORT: "70000" is not a port number'],
    [{ PORT: '0x1f90' }, 'PORT: "0x1f90" is not a port number'],
    [{ GATEWAY_UPGRADE_IDLE_TIMEOUT: '1e3' }, 'GATEWAY_UPGRADE_IDLE_TIMEOUT: "1e3" is not a whole number of seconds'],
  ])('%j', async (settings, message) => {
    const { code, output } = await refused(settings);
    expect(code, output).toBe(1);
    expect(output).toContain(message);
  });
});
