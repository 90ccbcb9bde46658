/**
 * PostgreSQL arrays as binary parameters (`${uuidArray(ids)}::uuid[]`): `pg` sends a Buffer parameter in the binary
 * format, which PostgreSQL reads with the element type's receive function, where a text array literal is scanned for
 * quotes and delimiters and each element parsed from its text (`array_in` and `uuid_in` were 3 % of the machine's CPU
 * at the registry's heartbeat rate; a UUID is 16 bytes here, 37 there). The layout is `array_send`'s: dimensions,
 * whether there is a NULL, the element type's OID, each dimension's length and lower bound, then each element as its
 * length (-1: NULL) and bytes.
 */

/** The OIDs of the element types written here (`pg_type`, fixed since PostgreSQL 8.3). */
const UUID_OID = 2950;
const TEXT_OID = 25;

/** Each hexadecimal digit's value by character code, -1 for any other character. */
const HEX = new Int8Array(128).fill(-1);
for (let i = 0; i < 10; i++) HEX[48 + i] = i;
for (let i = 0; i < 6; i++) {
  HEX[65 + i] = 10 + i;
  HEX[97 + i] = 10 + i;
}

/** The array's header at the start of `buf`; answers where the elements start. */
function writeHeader(buf: Buffer, elementOid: number, length: number, hasNull: boolean): number {
  if (length === 0) {
    buf.writeInt32BE(0, 0);
    buf.writeInt32BE(0, 4);
    buf.writeInt32BE(elementOid, 8);
    return 12;
  }
  buf.writeInt32BE(1, 0);
  buf.writeInt32BE(hasNull ? 1 : 0, 4);
  buf.writeInt32BE(elementOid, 8);
  buf.writeInt32BE(length, 12);
  buf.writeInt32BE(1, 16);
  return 20;
}

/**
 * A uuid[] parameter of `ids` (canonical UUIDs, any case: `isUuid`); a value that is not one throws a RangeError, so
 * that no other bytes ever reach the database in its place.
 */
export function uuidArray(ids: readonly string[]): Buffer {
  const headerBytes = ids.length === 0 ? 12 : 20;
  const buf = Buffer.allocUnsafe(headerBytes + ids.length * 20);
  let at = writeHeader(buf, UUID_OID, ids.length, false);
  for (const id of ids) {
    if (id.length !== 36) throw new RangeError(`not a UUID: ${id}`);
    buf.writeInt32BE(16, at);
    at += 4;
    for (let i = 0; i < 36; ) {
      if (i === 8 || i === 13 || i === 18 || i === 23) {
        if (id.charCodeAt(i) !== 45) throw new RangeError(`not a UUID: ${id}`);
        i++;
        continue;
      }
      const hi = HEX[id.charCodeAt(i)] ?? -1;
      const lo = HEX[id.charCodeAt(i + 1)] ?? -1;
      if (hi < 0 || lo < 0) throw new RangeError(`not a UUID: ${id}`);
      buf[at++] = (hi << 4) | lo;
      i += 2;
    }
  }
  return buf;
}

/** A text[] parameter of `values` (null and undefined: NULL), each element its UTF-8 bytes. */
export function textArray(values: readonly (string | null | undefined)[]): Buffer {
  let bytes = 0;
  let hasNull = false;
  for (const v of values) {
    if (v === null || v === undefined) hasNull = true;
    else bytes += Buffer.byteLength(v);
  }
  const buf = Buffer.allocUnsafe((values.length === 0 ? 12 : 20) + values.length * 4 + bytes);
  let at = writeHeader(buf, TEXT_OID, values.length, hasNull);
  for (const v of values) {
    if (v === null || v === undefined) {
      buf.writeInt32BE(-1, at);
      at += 4;
      continue;
    }
    const written = buf.write(v, at + 4, 'utf8');
    buf.writeInt32BE(written, at);
    at += 4 + written;
  }
  return buf;
}
