/**
 * /api/v1/auth/ssh-keys: a user's SSH public keys, to reach what they rent with OpenSSH's own client; added and
 * removed by the user themselves, signed in (no API key), listed by them or an API key with `read`.
 * /api/v1/auth/users/{userId}/ssh-keys: one user's keys, for the platform's services (and admins).
 */
import { type App, callerOf, noBody, PAGE_HEADERS, pageQuery, setNextPage, USER_ROLES } from '@gpu/common';
import { z } from 'zod';
import type { AuthContext } from '../domain/context.ts';
import {
  addSshKey,
  listOwnSshKeys,
  listUserSshKeys,
  MAX_PUBLIC_KEY_LENGTH,
  MAX_SSH_KEY_NAME_LENGTH,
  MAX_SSH_KEYS_PER_USER,
  MIN_RSA_BITS,
  removeSshKey,
  SSH_KEY_TYPES,
  type SshKey,
} from '../domain/ssh-keys/index.ts';
import { forRequest } from './request.ts';
import { problems, schemas } from './schemas.ts';

const sshKeySchema = z
  .object({
    id: z.uuid(),
    name: z.string().describe("the name given, else the key's comment (`me@laptop`), else `<type> key`"),
    type: z.enum(SSH_KEY_TYPES).describe('the key type, as OpenSSH names it'),
    fingerprint: z
      .string()
      .describe('as `ssh-keygen -lf` prints it: `SHA256:` and the unpadded base64 of the SHA-256 of the key'),
    public_key: z.string().describe('`<type> <base64>`: the key as an `authorized_keys` line takes it (no comment)'),
    created_at: z.string().describe('RFC 3339, UTC'),
  })
  .describe('An SSH public key of a user')
  .register(schemas, { id: 'SshKey' });

const sshKeyListSchema = z.array(sshKeySchema).register(schemas, { id: 'SshKeyList' });

const addBodySchema = z
  .object({
    public_key: z
      .string()
      .min(1)
      .max(MAX_PUBLIC_KEY_LENGTH)
      .describe(
        'one OpenSSH public-key line, `<type> <base64> [comment]` (the contents of `~/.ssh/id_ed25519.pub`): ' +
          `${SSH_KEY_TYPES.join(', ')}; RSA of at least ${MIN_RSA_BITS} bits`,
      ),
    name: z
      .string()
      .max(MAX_SSH_KEY_NAME_LENGTH)
      .regex(/\S/, 'not blank')
      // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
      .regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters')
      .transform((n) => n.trim())
      .optional()
      .describe("what to call it; the key's comment when absent"),
  })
  .register(schemas, { id: 'AddSshKeyRequest' });

const iso = (d: Date | string) => new Date(d).toISOString();

const sshKeyJson = (k: SshKey) => ({
  id: k.id,
  name: k.name,
  type: k.type as (typeof SSH_KEY_TYPES)[number],
  fingerprint: k.fingerprint,
  public_key: k.public_key,
  created_at: iso(k.created_at),
});

const tags = ['SSH keys'];
const SIGN_IN = 'The user themselves, signed in: an API key gets 403 INSUFFICIENT_SCOPE here.';
const PAGED = { openapi: { headers: { 200: PAGE_HEADERS } } };

export async function sshKeyRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/ssh-keys',
    {
      config: { roles: USER_ROLES },
      schema: {
        tags,
        operationId: 'addSshKey',
        summary: 'Register an SSH public key, to reach what you rent with OpenSSH',
        description:
          `${SIGN_IN} 400 INVALID_SSH_KEY (not one OpenSSH public-key line, options before the key, data that does ` +
          'not parse), SSH_KEY_IS_PRIVATE (a private key: nothing of it is kept), SSH_KEY_TYPE_NOT_ALLOWED (DSA, ' +
          `security-key and certificate types), SSH_KEY_TOO_SHORT (RSA under ${MIN_RSA_BITS} bits); 409 ` +
          `SSH_KEY_EXISTS (a key you registered), TOO_MANY_SSH_KEYS (past ${MAX_SSH_KEYS_PER_USER}).`,
        body: addBodySchema,
        response: { 201: sshKeySchema, ...problems(400, 401, 403, 409) },
      },
    },
    async (request, reply) => {
      const { public_key, name } = request.body;
      const key = await addSshKey(forRequest(ctx, request), callerOf(request), {
        publicKey: public_key,
        ...(name === undefined ? {} : { name }),
      });
      reply.code(201);
      return sshKeyJson(key);
    },
  );

  app.get(
    '/ssh-keys',
    {
      config: { roles: USER_ROLES, scope: 'read', ...PAGED },
      schema: {
        tags,
        operationId: 'listSshKeys',
        summary: 'Your SSH public keys, oldest first',
        description: `Your sign-in, or an API key with \`read\`. At most ${MAX_SSH_KEYS_PER_USER}; paged as every list.`,
        querystring: z.object(pageQuery),
        response: { 200: sshKeyListSchema, ...problems(400, 401, 403) },
      },
    },
    async (request, reply) => {
      const page = await listOwnSshKeys(ctx, callerOf(request), request.query);
      setNextPage(request, reply, page.nextCursor);
      return page.keys.map(sshKeyJson);
    },
  );

  app.delete(
    '/ssh-keys/:id',
    {
      config: { roles: USER_ROLES },
      schema: {
        tags,
        operationId: 'removeSshKey',
        summary: 'Remove one of your SSH public keys',
        description: `${SIGN_IN} It no longer lets you in from then on; another user's key (or one removed) is 404.`,
        params: z.object({ id: z.uuid() }),
        response: { 204: noBody('the key is removed'), ...problems(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      await removeSshKey(forRequest(ctx, request), callerOf(request), request.params.id);
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/users/:userId/ssh-keys',
    {
      config: { roles: ['service', 'admin'], ...PAGED },
      schema: {
        tags,
        operationId: 'listUserSshKeys',
        summary: "One user's SSH public keys (platform services and admins)",
        description:
          "For the platform's services that let a user in with their keys (a machine client of role `service`), and " +
          'admins; anyone else 403 ROLE_REQUIRED. 404 USER_NOT_FOUND for a user that does not exist.',
        params: z.object({ userId: z.uuid() }),
        querystring: z.object(pageQuery),
        response: { 200: sshKeyListSchema, ...problems(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      const page = await listUserSshKeys(ctx, callerOf(request), request.params.userId, request.query);
      setNextPage(request, reply, page.nextCursor);
      return page.keys.map(sshKeyJson);
    },
  );
}
