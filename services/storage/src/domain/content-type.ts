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
