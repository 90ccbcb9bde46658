/**
 * No NUL characters in request text. PostgreSQL cannot store U+0000 in `text` or `jsonb` (it answers "invalid byte
 * sequence" or "unsupported Unicode escape sequence"), so a JSON body or query string carrying one would otherwise
 * fail deep inside a repository as a 500. This hook refuses it first, for every route of every service, with the
 * platform's 400 naming the field. It runs after authentication (onRequest) and body parsing, before the route's
 * schema validation; raw bodies (storage uploads) are not parsed and so not looked at.
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../errors.ts';

/** The path (`body.gpus.0.name`) of the first string holding U+0000, or undefined. */
function nulPath(value: unknown, path: string, depth = 0): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? path : undefined;
  // Deeper than any schema the platform accepts: schema validation refuses such a body anyway.
  if (value === null || typeof value !== 'object' || depth > 32) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nulPath(value[i], `${path}.${i}`, depth + 1);
      if (found) return found;
    }
    return undefined;
  }
  if (Buffer.isBuffer(value)) return undefined;
  for (const [key, v] of Object.entries(value)) {
    const found = key.includes('\u0000') ? `${path}.${key}` : nulPath(v, `${path}.${key}`, depth + 1);
    if (found) return found;
  }
  return undefined;
}

export const refuseNulCharacters = fp(
  async (app: FastifyInstance) => {
    app.addHook('preValidation', async (request) => {
      const path = nulPath(request.body, 'body') ?? nulPath(request.query, 'querystring');
      if (path) {
        throw errors.validation('text must not contain NUL (U+0000) characters', [
          { path, message: 'must not contain NUL (U+0000) characters' },
        ]);
      }
    });
  },
  { name: 'refuse-nul-characters' },
);
