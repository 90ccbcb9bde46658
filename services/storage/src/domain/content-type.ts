/**
 * The upload content-type rule of the spec: the request's Content-Type
 * header, else a guess from the key's extension, else application/octet-stream.
 *
 * The extension is what follows the last dot of the key's last path segment,
 * when that dot is neither the segment's first character nor its last: a bare
 * name (`json`, `dir/html`) has none, and neither has a dotfile (`.bashrc`,
 * `.json`) or a trailing dot (`file.`). Case is ignored (`a.HTML` is text/html).
 */
import mime from 'mime-types';

const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

/**
 * What a content type may hold: printable ASCII and spaces (a media type and its parameters are ASCII, RFC 9110
 * 8.3.1). It travels to the store as a header and back on every download: a control character or anything past
 * U+007E (which Node sends as Latin-1 at best, and refuses above U+00FF) failed at the store as a 502 before.
 */
export const CONTENT_TYPE_PATTERN = /^[\x20-\x7e]*$/;
/** The longest content type kept. */
export const MAX_CONTENT_TYPE_LENGTH = 255;

/** Why a content type a caller gave cannot be kept, or undefined when it can. */
export function contentTypeProblem(value: string): string | undefined {
  if (value.length > MAX_CONTENT_TYPE_LENGTH) return `must be at most ${MAX_CONTENT_TYPE_LENGTH} characters`;
  if (!CONTENT_TYPE_PATTERN.test(value)) return 'must be printable ASCII (a media type such as text/csv)';
  return undefined;
}

/** The key's extension without its dot (`gz` for `archive.tar.gz`), or undefined when it has none. */
function keyExtension(key: string): string | undefined {
  const name = key.slice(key.lastIndexOf('/') + 1);
  const dot = name.lastIndexOf('.');
  if (dot <= 0 || dot === name.length - 1) return undefined;
  return name.slice(dot + 1);
}

export function resolveContentType(header: string | undefined, key: string): string {
  const given = header?.trim();
  if (given) return given;
  const ext = keyExtension(key);
  return (ext !== undefined && mime.lookup(ext)) || DEFAULT_CONTENT_TYPE;
}
