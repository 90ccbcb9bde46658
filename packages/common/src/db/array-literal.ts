/**
 * PostgreSQL array literals for array parameters (`${arrayLiteral(ids)}::uuid[]`), built in one pass. `pg` turns a
 * JavaScript array into the same text itself, quoting every element with two regular-expression replacements and a
 * string concatenation each: at the registry's heartbeat batches (four to twelve arrays of a few hundred elements a
 * statement) that was a sixth of everything the service allocated at the fleet's rate. Elements that need no quotes
 * (UUIDs, numbers, the usual IDs) go in as they are, joined; the others quoted and escaped as PostgreSQL reads them.
 */

/** An element PostgreSQL reads unquoted as itself: no delimiter, quote, backslash or space, not empty, not NULL. */
const PLAIN = /^[0-9A-Za-z_.:+-]+$/;

function element(v: string | number | boolean | null | undefined): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new RangeError(`not a finite number: ${v}`);
    return String(v);
  }
  if (typeof v === 'boolean') return v ? 't' : 'f';
  if (PLAIN.test(v) && !(v.length === 4 && v.toUpperCase() === 'NULL')) return v;
  return `"${v.replace(/[\\"]/g, '\\$&')}"`;
}

/** The array literal of `values` (null and undefined: NULL), for a parameter cast to an array type. */
export function arrayLiteral(values: readonly (string | number | boolean | null | undefined)[]): string {
  return `{${values.map(element).join(',')}}`;
}
