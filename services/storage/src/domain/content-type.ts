/**
 * The upload content-type rule of the spec: the request's Content-Type
 * header, else a guess from the key's extension, else application/octet-stream.
 */
import mime from 'mime-types';

export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

export function resolveContentType(header: string | undefined, key: string): string {
  const given = header?.trim();
  if (given) return given;
  return mime.lookup(key) || DEFAULT_CONTENT_TYPE;
}
