/** Whether `err` is PostgreSQL's unique violation (23505) of the named constraint or unique index. */
export function isUniqueViolation(err: unknown, name: string): boolean {
  const e = err as { code?: string; constraint?: string; message?: string };
  return e?.code === '23505' && (e.constraint === name || (e.message ?? '').includes(name));
}
