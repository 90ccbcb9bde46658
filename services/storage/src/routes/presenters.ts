/** Domain values as the API's JSON. */
import type { ObjectEntry } from '../domain/store.ts';

/** ObjectInfo: snake_case, RFC 3339 UTC times, null for what is unknown. */
export interface ObjectInfo {
  key: string;
  size: number;
  last_modified: string | null;
  content_type: string | null;
  etag: string | null;
  /** True for a common prefix ("folder") in a non-recursive listing. */
  is_prefix: boolean;
}

export function objectInfo(entry: ObjectEntry): ObjectInfo {
  return {
    key: entry.key,
    size: entry.size,
    last_modified: entry.lastModified?.toISOString() ?? null,
    content_type: entry.contentType ?? null,
    etag: entry.etag ?? null,
    is_prefix: entry.isPrefix,
  };
}

/** An instant as RFC 3339 UTC in whole seconds (`2026-03-01T10:00:00Z`): when a presigned URL expires. */
export function utcSeconds(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}
