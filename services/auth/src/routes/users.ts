/** /api/v1/auth/users: role management, for admins. */
import { type App, callerOf } from '@gpu/common';
import { z } from 'zod';
import { setRoles } from '../domain/accounts/index.ts';
import type { AuthContext } from '../domain/context.ts';
import { forRequest } from './request.ts';
import { problems, roleSchema, schemas, userJson, userSchema } from './schemas.ts';

const setRolesBodySchema = z
  .object({ roles: z.array(roleSchema).min(1).max(3) })
  .describe("The user's new roles: they replace the old ones")
  .register(schemas, { id: 'SetRolesRequest' });

export async function userRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.put(
    '/users/:id/roles',
    {
      config: { roles: ['admin'] },
      schema: {
        tags: ['users'],
        operationId: 'setUserRoles',
        summary: "Replace a user's roles (admin only)",
        description:
          'Takes effect in tokens issued from now on (login and refresh read the roles); access tokens already ' +
          'issued keep their roles until they expire. The last admin cannot lose the admin role (409 LAST_ADMIN).',
        params: z.object({ id: z.uuid() }),
        body: setRolesBodySchema,
        response: { 200: userSchema, ...problems(400, 401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const user = await setRoles(
        forRequest(ctx, request),
        callerOf(request).subject,
        request.params.id,
        request.body.roles,
      );
      return userJson(user);
    },
  );
}
