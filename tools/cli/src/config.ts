/**
 * Where `gpu` keeps who it is: `config.json` in `$GPU_CONFIG_DIR`, else `$XDG_CONFIG_HOME/gpu`, else
 * `~/.config/gpu` (the folder 0700, the file 0600, written whole through a rename): the platform's URL, either an
 * API key or the refresh token of a sign-in (single use: each use writes the next one), never printed, and the default
 * wallet (`gpu wallet use`, or the first `gpu wallet open`), which a new `gpu login` forgets with the sign-in.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

export interface CliConfig {
  url?: string;
  api_key?: string;
  refresh_token?: string;
  email?: string;
  /** The wallet that pays when a command is given none (`rent`, `run`, `jobs submit`, `wallet balance`, ...). */
  wallet?: string;
}

/** A file of the config directory: `config.json`, or `uploads.json` (resumable uploads under way). */
type ConfigFileName = 'config.json' | 'uploads.json';

/** The config directory: `$GPU_CONFIG_DIR`, else `$XDG_CONFIG_HOME/gpu`, else `~/.config/gpu`. */
export function configDir(env: NodeJS.ProcessEnv): string {
  return env.GPU_CONFIG_DIR || path.join(env.XDG_CONFIG_HOME || path.join(homedir(), '.config'), 'gpu');
}

function configFile(env: NodeJS.ProcessEnv, name: ConfigFileName = 'config.json'): string {
  return path.join(configDir(env), name);
}

/** A JSON file of the config directory; `{}` when there is none (or it cannot be read). */
export function readConfigFile<T extends object>(env: NodeJS.ProcessEnv, name: ConfigFileName): Partial<T> {
  try {
    return JSON.parse(readFileSync(configFile(env, name), 'utf8')) as Partial<T>;
  } catch {
    return {};
  }
}

export function readConfig(env: NodeJS.ProcessEnv): CliConfig {
  return readConfigFile<CliConfig>(env, 'config.json');
}

export function writeConfig(env: NodeJS.ProcessEnv, config: CliConfig): void {
  writeConfigFile(env, 'config.json', config);
}

/** Writes a JSON file of the config directory, mode 0600, whole. */
export function writeConfigFile(env: NodeJS.ProcessEnv, name: ConfigFileName, value: object): void {
  const file = configFile(env, name);
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  chmodSync(path.dirname(file), 0o700);
  // A file of this run's own, renamed over the last: two runs at once never write into one another's.
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/** Saves `change` into the configuration as it is now (another step of this run may have rotated its sign-in). */
export function updateConfig(env: NodeJS.ProcessEnv, change: Partial<CliConfig>): void {
  writeConfig(env, { ...readConfig(env), ...change });
}
