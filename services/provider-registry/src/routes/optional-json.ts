/**
 * A JSON body parser for routes whose body is optional (heartbeats): an empty body, with or without
 * a JSON content type, is no body. Registered in the routes' own plugin, so it touches no other route.
 */
export function parseOptionalJson(
  _request: unknown,
  body: string,
  done: (err: Error | null, value?: unknown) => void,
): void {
  if (body.trim() === '') {
    done(null, undefined);
    return;
  }
  try {
    done(null, JSON.parse(body));
  } catch (err) {
    done(Object.assign(err as Error, { statusCode: 400, code: 'FST_ERR_CTP_INVALID_JSON_BODY' }));
  }
}
