/**
 * Writes `src/generated/<service>.ts`, the TypeScript types of each service's API, from the OpenAPI document the
 * service serves and commits (`services/<service>/openapi.json`), with openapi-typescript. `test/generated.test.ts`
 * fails when a document and its types disagree.
 *   pnpm --filter @gpu/client generate
 */
import { writeFileSync } from 'node:fs';
import { generatedPath, generateTypes, SERVICES } from './openapi-types.ts';

for (const service of SERVICES) {
  writeFileSync(generatedPath(service), await generateTypes(service));
  process.stdout.write(`wrote ${generatedPath(service)}\n`);
}
