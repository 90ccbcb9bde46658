/**
 * How `pnpm start` signs and verifies access tokens, from the auth settings the auth service documents: where the
 * auth service reads them (its configuration file `AUTH_CONFIG_FILE`, the plain names `ALGORITHM`, `SECRET_KEY` or
 * `JWT_SECRET`, `JWT_PRIVATE_KEY`, `JWT_PRIVATE_KEY_FILE`, and the structured `AUTH__JWT__*` names, each later one
 * winning). Three modes:
 *
 * - **HS256 with a secret** (`ALGORITHM=HS256 SECRET_KEY=...`, at least 32 characters): the auth service signs with
 *   the secret and publishes an empty JWKS, so the other services are given the same secret (`access.secret`).
 * - **EdDSA, ES256 or RS256 with a key of the user's** (`JWT_PRIVATE_KEY_FILE=...` or `JWT_PRIVATE_KEY`): the auth
 *   service signs with it, the others verify with its JWKS.
 * - **The default, EdDSA with a key made at first start** in the data folder (`<data>/auth/jwt-signing-key.pem`,
 *   mode 0600; ES256 and RS256 get a file of their own), kept so tokens outlive a restart.
 *
 * A combination that cannot work is refused before anything starts (`SettingError`, one line): HS256 without a
 * secret or with one under 32 characters, a secret beside an asymmetric algorithm (it would be ignored), a private
 * key beside HS256, a key file that does not exist, an unknown algorithm.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { ALGORITHMS, type Algorithm, MIN_SECRET_LENGTH } from '../../services/auth/src/jwt-settings.ts';
import { SettingError } from './platform.ts';

export interface AuthMode {
  /** How tokens are signed, for the start-up log. */
  description: string;
  /** Variables the auth service is given, beside this process's environment. */
  authEnv: Record<string, string>;
  /** Variables a service that verifies tokens is given, by its configuration prefix (`STORAGE`, `BILLING`, ...). */
  verifierEnv(prefix: string): Record<string, string>;
}

const JWT_KEYS = ['algorithm', 'secret_key', 'private_key', 'private_key_file'] as const;
type JwtKey = (typeof JWT_KEYS)[number];
/** The plain names of each key, in the order the auth service applies them (a later one wins). */
const ALIASES: Record<JwtKey, string[]> = {
  algorithm: ['ALGORITHM'],
  secret_key: ['JWT_SECRET', 'SECRET_KEY'],
  private_key: ['JWT_PRIVATE_KEY'],
  private_key_file: ['JWT_PRIVATE_KEY_FILE'],
};
/** Key names compared as the configuration loader compares them: case and underscores ignored. */
const norm = (s: string) => s.toLowerCase().replaceAll('_', '');

/** A setting's value and where it came from (a variable's name, or the file). */
interface Setting {
  value: string;
  from: string;
  /** The variable that set it; none when it came from the file. */
  variable?: string;
}

/** The auth service's `jwt` settings as it would read them: the file, then the plain names, then `AUTH__JWT__*`. */
async function jwtSettings(env: NodeJS.ProcessEnv): Promise<Partial<Record<JwtKey, Setting>>> {
  const found: Partial<Record<JwtKey, Setting>> = {};
  const file = env.AUTH_CONFIG_FILE;
  if (file) {
    // Loaded only for a file: a YAML parser is a noticeable part of this script's start.
    const { default: YAML } = await import('yaml');
    let jwt: unknown;
    try {
      const parsed = YAML.parse(readFileSync(file, 'utf8')) as Record<string, unknown> | null;
      jwt = Object.entries(parsed ?? {}).find(([k]) => norm(k) === 'jwt')?.[1];
    } catch (err) {
      throw new SettingError(`AUTH_CONFIG_FILE ${file} cannot be read: ${(err as Error).message}`);
    }
    for (const [k, v] of Object.entries(jwt && typeof jwt === 'object' ? jwt : {})) {
      const key = JWT_KEYS.find((j) => norm(j) === norm(k));
      if (key && v !== undefined && v !== null && v !== '') found[key] = { value: String(v), from: `jwt.${key}` };
    }
  }
  for (const key of JWT_KEYS) {
    const plain = ALIASES[key].filter((name) => env[name]);
    const values = new Set(plain.map((name) => env[name]));
    if (values.size > 1) throw new SettingError(`${plain.join(' and ')} are both set, to different values: set one`);
    const structured = Object.keys(env).filter((name) => env[name] && norm(name) === norm(`AUTH__JWT__${key}`));
    const variable = structured.at(-1) ?? plain.at(-1);
    if (variable) found[key] = { value: env[variable] as string, from: variable, variable };
  }
  return found;
}

/** The key file a development setup's auth service makes at first start, one per algorithm. */
function generatedKeyFile(authDir: string, algorithm: Exclude<Algorithm, 'HS256'>): string {
  return path.join(authDir, algorithm === 'EdDSA' ? 'jwt-signing-key.pem' : `jwt-signing-key-${algorithm}.pem`);
}

/**
 * The mode the settings in `env` ask for, or a SettingError naming what is wrong. `authDir` is the data folder's
 * `auth/`; `authCwd` the folder the auth service runs in (a relative path in its configuration file is taken from
 * there; one in a variable from this process's folder, and handed on whole).
 */
export async function authMode(env: NodeJS.ProcessEnv, authDir: string, authCwd: string): Promise<AuthMode> {
  const s = await jwtSettings(env);
  const algorithm = (s.algorithm?.value ?? 'EdDSA') as Algorithm;
  if (!ALGORITHMS.includes(algorithm)) {
    throw new SettingError(`${s.algorithm?.from} ${algorithm} is not one of ${ALGORITHMS.join(', ')}`);
  }
  const key = s.private_key ?? s.private_key_file;
  if (algorithm === 'HS256') {
    const secret = s.secret_key;
    if (key) {
      throw new SettingError(
        `${key.from} is for EdDSA, ES256 and RS256, but ${s.algorithm?.from} is HS256, which signs with SECRET_KEY: set one or the other`,
      );
    }
    if (!secret) {
      throw new SettingError(
        `${s.algorithm?.from}=HS256 signs with a shared secret: set SECRET_KEY (or JWT_SECRET), at least ${MIN_SECRET_LENGTH} characters (openssl rand -base64 48)`,
      );
    }
    if (secret.value.length < MIN_SECRET_LENGTH) {
      throw new SettingError(
        `${secret.from} is ${secret.value.length} characters long; HS256 needs at least ${MIN_SECRET_LENGTH} (openssl rand -base64 48)`,
      );
    }
    return {
      description: `HS256 with the secret in ${secret.from}; every service verifies with it`,
      authEnv: {},
      verifierEnv: (prefix) => ({ [`${prefix}__ACCESS__SECRET`]: secret.value }),
    };
  }
  if (s.secret_key) {
    throw new SettingError(
      `${s.secret_key.from} is set, but ${s.algorithm ? `${s.algorithm.from} is ${algorithm}` : 'the algorithm is EdDSA (the default)'}, which signs with a key pair: set ALGORITHM=HS256 to sign with the secret, or unset ${s.secret_key.from}`,
    );
  }
  const verifierEnv = () => ({});
  if (s.private_key) {
    return { description: `${algorithm} with the private key in ${s.private_key.from}`, authEnv: {}, verifierEnv };
  }
  if (s.private_key_file) {
    const { value, variable, from } = s.private_key_file;
    const file = path.resolve(variable ? process.cwd() : authCwd, value);
    if (!existsSync(file) || !statSync(file).isFile()) throw new SettingError(`${from} ${value} does not exist`);
    return {
      description: `${algorithm} with the private key in ${file}`,
      authEnv: variable ? { [variable]: file } : {},
      verifierEnv,
    };
  }
  const file = generatedKeyFile(authDir, algorithm);
  return {
    description: `${algorithm} with the key in ${file}${existsSync(file) ? '' : ' (made now)'}`,
    authEnv: { JWT_PRIVATE_KEY_FILE: file },
    verifierEnv,
  };
}

/**
 * Sign-ups an hour that auth takes from one address when `pnpm start` listens on loopback alone (its
 * `rate_limit.register_per_ip`; 10 an hour by default). There every caller is this machine, 127.0.0.1, so the
 * per-address limit is one budget for everything run here, kept in auth's database across restarts: `pnpm demo` signs
 * up four accounts a run, so auth's 10 refused its third run within an hour (429 RATE_LIMITED). No other machine can
 * reach a loopback platform, so the limit guards nothing there.
 */
export const LOOPBACK_REGISTER_PER_IP = '1000/1h';

/** Whether `bind` is a loopback address (127.0.0.0/8, ::1): what listens there is reached from this machine alone. */
function isLoopback(bind: string): boolean {
  const v4 = bind.replace(/^::ffff:/i, '');
  return /^127\.\d+\.\d+\.\d+$/.test(v4) || bind === '::1';
}

/**
 * What the auth service is given for a platform that listens on `bind`: on loopback alone, the register limit above,
 * unless the user set one (an `AUTH__RATE_LIMIT__REGISTER_PER_IP` variable, in any spelling the auth service takes, or
 * `rate_limit.register_per_ip` in AUTH_CONFIG_FILE, which a variable would override); elsewhere nothing: a platform
 * other machines reach keeps auth's own limits.
 */
export async function loopbackAuthEnv(env: NodeJS.ProcessEnv, bind: string): Promise<Record<string, string>> {
  if (!isLoopback(bind)) return {};
  const keys = ['rate_limit', 'register_per_ip'];
  const named = Object.keys(env).some((name) => {
    if (!env[name] || !name.startsWith('AUTH__')) return false;
    const segments = name.slice('AUTH__'.length).split('__').filter(Boolean);
    return segments.length === 2 && segments.every((s, i) => norm(s) === norm(keys[i]!));
  });
  if (named) return {};
  if (env.AUTH_CONFIG_FILE) {
    const { default: YAML } = await import('yaml');
    let parsed: unknown;
    try {
      parsed = YAML.parse(readFileSync(env.AUTH_CONFIG_FILE, 'utf8'));
    } catch {
      // An unreadable file is refused with the auth settings (authMode), before anything starts.
      return {};
    }
    const child = (tree: unknown, key: string) =>
      tree && typeof tree === 'object' ? Object.entries(tree).find(([k]) => norm(k) === norm(key))?.[1] : undefined;
    const set = child(child(parsed, 'rate_limit'), 'register_per_ip');
    if (set !== undefined && set !== null && set !== '') return {};
  }
  return { AUTH__RATE_LIMIT__REGISTER_PER_IP: LOOPBACK_REGISTER_PER_IP };
}
