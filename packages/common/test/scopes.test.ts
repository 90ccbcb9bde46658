/**
 * What an API key's scopes open: `read` stands in for the GET and HEAD routes that take keys, but never for
 * `connect`, whose streams into a renter's workload open with a GET too.
 */
import { describe, expect, it } from 'vitest';
import { scopeAllows } from '../src/auth/scopes.ts';

describe('API key scopes', () => {
  it('let `read` call the GET routes of other scopes, and never open a stream into a workload', () => {
    expect(scopeAllows(['read'], 'sessions', 'GET')).toBe(true);
    expect(scopeAllows(['read'], 'sessions', 'POST')).toBe(false);
    expect(scopeAllows(['read'], 'connect', 'GET')).toBe(false);
    expect(scopeAllows(['read', 'sessions'], 'connect', 'GET')).toBe(false);
    expect(scopeAllows(['connect'], 'connect', 'GET')).toBe(true);
    expect(scopeAllows(['connect'], 'sessions', 'GET')).toBe(false);
  });
});
