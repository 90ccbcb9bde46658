/**
 * Which platform `gpu` talks to, first found of:
 *
 * 1. `--url`, then `GPU_URL`, then the URL saved by `gpu login` (what the user said);
 * 2. `PLATFORM_PORT_BASE` / `PLATFORM_HOST`, the variables `pnpm start` and every script of the checkout follow: the
 *    gateway at `PLATFORM_HOST:PLATFORM_PORT_BASE+10`;
 * 3. the file a running `pnpm start` writes into its data folder (`$PLATFORM_DATA_DIR/platform.json`, else the
 *    checkout's `.data/platform.json`), naming its gateway;
 * 4. `http://127.0.0.1:8080`, `pnpm start`'s and docker-compose's gateway on their own ports.
 *
 * The same order gives the local chain's JSON-RPC for a deposit from a keypair: `--rpc`, `SOLANA_RPC_URL`, the port
 * variables (`PLATFORM_PORT_BASE+5`), the file, `http://127.0.0.1:8899`.
 */
import {
  platformDataDir,
  platformFile,
  platformHost,
  platformPorts,
  readPlatformFile,
} from '../../../scripts/lib/platform.ts';

const DEFAULT_URL = 'http://127.0.0.1:8080';

/** A URL and where it came from (a phrase: "from GPU_URL"), said when the platform cannot be reached there. */
export interface Found {
  url: string;
  from: string;
}

/** Whether the environment places the platform itself (pnpm start's variables). */
const placedByEnv = (env: NodeJS.ProcessEnv) => Boolean(env.PLATFORM_PORT_BASE || env.PLATFORM_HOST);

/** The platform's gateway, and what named it. */
export function platformUrl(given: string | undefined, env: NodeJS.ProcessEnv, saved: string | undefined): Found {
  const found = ((): Found => {
    if (given) return { url: given, from: 'given with --url' };
    if (env.GPU_URL) return { url: env.GPU_URL, from: 'from GPU_URL' };
    if (saved) return { url: saved, from: 'saved by gpu login' };
    if (placedByEnv(env)) {
      const from = 'from PLATFORM_PORT_BASE and PLATFORM_HOST';
      return { url: platformHost(env).url(platformPorts(env).gateway), from };
    }
    const dataDir = platformDataDir(env);
    const written = readPlatformFile(dataDir);
    if (written) return { url: written.gateway, from: `named by ${platformFile(dataDir)}, pnpm start's` };
    return { url: DEFAULT_URL, from: "the default, pnpm start's gateway on its own ports" };
  })();
  return { ...found, url: found.url.replace(/\/$/, '') };
}

/** The local chain's JSON-RPC, in the same order (`--rpc`, SOLANA_RPC_URL, the variables, the file, 8899). */
export function chainRpcUrl(given: string | undefined, env: NodeJS.ProcessEnv): string {
  if (given) return given;
  if (env.SOLANA_RPC_URL) return env.SOLANA_RPC_URL;
  if (placedByEnv(env)) return platformHost(env).url(platformPorts(env).solana);
  return readPlatformFile(platformDataDir(env))?.solana_rpc ?? 'http://127.0.0.1:8899';
}
