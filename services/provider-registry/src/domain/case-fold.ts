/**
 * The one case-insensitivity of discovery's GPU model and architecture filters: ASCII letters only, the same in the
 * service and in the database whatever its locale (PostgreSQL's lower() follows the database's LC_CTYPE, under which
 * `Ä` may or may not become `ä`, and JavaScript's toLowerCase() follows Unicode: a name folded by one and searched by
 * the other was found by one sort and not by another). Names outside ASCII match as written.
 */
const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const LOWER = 'abcdefghijklmnopqrstuvwxyz';

/** `text` with its ASCII capitals made small (as `foldSql` does in the database). */
export function foldCase(text: string): string {
  return text.replace(/[A-Z]+/g, (m) => m.toLowerCase());
}

/** `foldCase` in SQL, of the SQL expression `expr` (a column: `g.model_name`). */
export function foldSql(expr: string): string {
  return `translate(${expr}, '${UPPER}', '${LOWER}')`;
}
