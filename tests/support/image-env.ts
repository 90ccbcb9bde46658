/**
 * The environment the root Dockerfile's runtime stage gives every service image (`ENV` lines of its last stage):
 * what compose and the Kubernetes manifests add to, so their configurations are checked as the images load them.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '../..');

/** `NAME=value` pairs of the last stage's `ENV` instructions, `${ARG}` the build argument's value or default. */
export function imageEnv(args: Record<string, string> = {}): Record<string, string> {
  const dockerfile = readFileSync(path.join(root, 'Dockerfile'), 'utf8').replace(/\\\n\s*/g, ' ');
  const last = dockerfile.split(/^(?=FROM )/m).at(-1) ?? '';
  const defaults = Object.fromEntries(
    [...last.matchAll(/^ARG ([A-Za-z_]\w*)(?:=(\S*))?$/gm)].map(([, name, value]) => [name!, value ?? '']),
  );
  const argument = (name: string) => args[name] ?? defaults[name] ?? '';
  const env: Record<string, string> = {};
  for (const line of last.split('\n').filter((l) => l.startsWith('ENV '))) {
    for (const [, name, value] of line.slice(4).matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S*)/g)) {
      env[name!] = value!.replace(/\$\{(\w+)\}/g, (_, arg: string) => argument(arg));
    }
  }
  return env;
}
