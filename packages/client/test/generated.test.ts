/** The committed types are what openapi-typescript makes of each service's committed OpenAPI document. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generatedPath, generateTypes, SERVICES } from '../scripts/openapi-types.ts';

describe('generated API types', () => {
  it.each(SERVICES)('match services/%s/openapi.json (else: pnpm --filter @gpu/client generate)', async (service) => {
    expect(readFileSync(generatedPath(service), 'utf8')).toBe(await generateTypes(service));
  });
});
