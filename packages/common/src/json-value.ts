/**
 * Free-form JSON a client sends to be stored as given (a machine's `metadata`, a usage report's `metrics`): its depth
 * bounded, and no NUL character or unpaired surrogate in any key or string (PostgreSQL's jsonb can't store either).
 */

/**
 * Whether `value` nests no deeper than `maxDepth` objects or arrays and has no NUL character or unpaired surrogate in
 * any key or string.
 * Iterative: a body nested thousands deep is refused (a 400 where a schema refines with it), never a stack overflow.
 */
export function isStorableJson(value: unknown, maxDepth: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\0') || !v.isWellFormed()) return false;
    } else if (v !== null && typeof v === 'object') {
      if (depth >= maxDepth) return false;
      for (const [k, child] of Object.entries(v)) {
        if (k.includes('\0') || !k.isWellFormed()) return false;
        stack.push([child, depth + 1]);
      }
    }
  }
  return true;
}
