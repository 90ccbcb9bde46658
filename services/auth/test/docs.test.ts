import { describe, expect, it } from 'vitest';
import { useAuth } from './helpers.ts';

const auth = useAuth();

describe('documentation and health', () => {
  it('describes every endpoint in the OpenAPI document, with error responses', async () => {
    const spec = (await auth.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const paths = spec.paths as Record<string, Record<string, { responses: Record<string, unknown>; tags: string[] }>>;
    expect(Object.keys(paths)).toEqual(
      expect.arrayContaining([
        '/api/v1/auth/register',
        '/api/v1/auth/login',
        '/api/v1/auth/refresh',
        '/api/v1/auth/logout',
        '/api/v1/auth/me',
        '/api/v1/auth/users/{id}/roles',
        '/.well-known/jwks.json',
      ]),
    );
    expect(Object.keys(paths['/api/v1/auth/register']!.post!.responses)).toEqual(
      expect.arrayContaining(['201', '400', '403', '409', '429']),
    );
    expect(paths['/api/v1/auth/users/{id}/roles']!.put!.responses).toHaveProperty('403');
    expect(spec.components.securitySchemes.bearerAuth.scheme).toBe('bearer');
  });

  it('serves Swagger UI at /docs and ReDoc at /redoc from local files', async () => {
    expect((await auth.app.inject({ method: 'GET', url: '/docs/static/swagger-ui.css' })).statusCode).toBe(200);
    const redoc = await auth.app.inject({ method: 'GET', url: '/redoc' });
    expect(redoc.statusCode).toBe(200);
    expect(redoc.body).toContain('/redoc/redoc.standalone.js');
    expect((await auth.app.inject({ method: 'GET', url: '/redoc/redoc.standalone.js' })).statusCode).toBe(200);
  });

  it('reports the database in /health', async () => {
    const res = await auth.app.inject({ method: 'GET', url: '/health' });
    expect(res.json()).toMatchObject({ status: 'UP', checks: { database: { status: 'UP' } } });
  });
});
