/** Zod schemas of the problem body, for route response declarations and OpenAPI. */
import { z } from 'zod';

export const problemSchema = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.string().describe('stable UPPER_SNAKE machine code'),
    request_id: z.string().optional(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .loose()
  .describe('RFC 9457 problem details (application/problem+json)');

/**
 * A response without a body (204, a redirect). `type: 'null'` in the JSON schema is what tells @fastify/swagger to
 * describe no content (a plain `z.null()` reads as a JSON body of `null`).
 */
export const noBody = (description: string) => z.null().meta({ type: 'null', description });
