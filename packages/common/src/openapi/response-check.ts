/**
 * The contract check (`OPENAPI_CHECK_FILE`, config.ts): each answer of a documented operation (one with an
 * `operationId`: test-only routes are left alone) is compared with the app's own OpenAPI document: its status must be
 * declared, its media type one the status declares, its JSON body valid against the declared schema (components
 * resolved), and the headers the document marks required present. A mismatch is appended to the file as one JSON
 * line; the answer itself goes out unchanged. Binary and streamed bodies are checked by status and media type only.
 */
import { appendFileSync } from 'node:fs';
import type { ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

type Json = Record<string, unknown>;
interface Media {
  schema?: Json;
}
interface Response {
  $ref?: string;
  content?: Record<string, Media>;
  headers?: Record<string, { $ref?: string; required?: boolean }>;
}
interface Operation {
  operationId?: string;
  responses: Record<string, Response>;
}

/** A path in either notation with its parameters unnamed: `/a/:id/*` and `/a/{id}/{key}` are `/a/{}/{}`. */
const shape = (path: string) => path.replace(/\{[^}]*\}|:[^/]+|\*/g, '{}');

/** The checker of one app's answers against its document, made on the first answer (the document is final then). */
class ContractChecker {
  private readonly ops = new Map<string, Operation>();
  private readonly ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
  private readonly validators = new Map<Json, ValidateFunction>();

  constructor(
    private readonly doc: Json,
    private readonly file: string,
    private readonly service: string,
  ) {
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>)) {
      for (const [method, op] of Object.entries(item)) {
        if (op?.operationId) this.ops.set(`${method.toUpperCase()} ${shape(path)}`, op);
      }
    }
    this.ajv.addSchema({ $id: 'doc', components: doc.components }, 'doc');
  }

  private resolve<T>(value: T & { $ref?: string }): T {
    if (!value?.$ref) return value;
    const parts = value.$ref.replace(/^#\//, '').split('/');
    let target: unknown = this.doc;
    for (const p of parts) target = (target as Json)[p];
    return { ...(target as T), ...value, $ref: undefined };
  }

  private validator(schema: Json): ValidateFunction {
    let v = this.validators.get(schema);
    if (!v) {
      // `#/components/...` inside the schema points into the document: rebase onto the registered one.
      const rebased = JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"doc#/components/')) as Json;
      v = this.ajv.compile(rebased);
      this.validators.set(schema, v);
    }
    return v;
  }

  check(request: FastifyRequest, reply: FastifyReply, payload: unknown): void {
    const url = request.routeOptions.url;
    if (!url) return;
    // An answer another server gave, passed on as it is (a workload's own, through reach): not the document's.
    if ((reply.raw as unknown as Record<symbol, unknown>)[Symbol.for('gpu.passed-through')]) return;
    const op = this.ops.get(`${request.method} ${shape(url)}`);
    if (!op) return;
    const status = reply.statusCode;
    const problems: string[] = [];
    const declared = op.responses[String(status)] ?? op.responses.default;
    if (!declared) {
      this.write(request, status, [`status ${status} is not declared (${Object.keys(op.responses).join(', ')})`]);
      return;
    }
    const response = this.resolve(declared);
    const type = String(reply.getHeader('content-type') ?? '')
      .split(';')[0]!
      .trim();
    const content = response.content ?? {};
    const types = Object.keys(content);
    const hasBody = request.method !== 'HEAD' && status !== 204 && status !== 304 && payload != null && payload !== '';
    if (hasBody && types.length === 0) problems.push(`a body (${type || 'no content-type'}) where none is declared`);
    if (hasBody && types.length > 0) {
      const media = types.find(
        (t) => t === type || t === '*/*' || (t.endsWith('/*') && type.startsWith(t.slice(0, -1))),
      );
      if (!media) problems.push(`content-type ${type || '(none)'} is not one of ${types.join(', ')}`);
      else if (/json/.test(type) && typeof payload === 'string' && content[media]?.schema) {
        let body: unknown;
        try {
          body = JSON.parse(payload);
        } catch {
          problems.push('the body is not JSON');
        }
        const validate = this.validator(content[media].schema);
        if (body !== undefined && !validate(body)) {
          problems.push(`the body does not match: ${this.ajv.errorsText(validate.errors, { dataVar: 'body' })}`);
        }
      }
    }
    for (const [name, header] of Object.entries(response.headers ?? {})) {
      if (this.resolve(header).required && reply.getHeader(name) === undefined) problems.push(`header ${name} missing`);
    }
    if (problems.length > 0) this.write(request, status, problems);
  }

  private write(request: FastifyRequest, status: number, problems: string[]): void {
    const line = {
      service: this.service,
      operation: `${request.method} ${request.routeOptions.url}`,
      url: request.url,
      status,
      problems,
    };
    appendFileSync(this.file, `${JSON.stringify(line)}\n`);
  }
}

/** Checks every answer of the app against its document, appending mismatches to `file`. */
export function checkAnswers(app: FastifyInstance, file: string, service: string): void {
  let checker: ContractChecker | undefined;
  app.addHook('onSend', async (request, reply, payload) => {
    try {
      checker ??= new ContractChecker(app.swagger() as unknown as Json, file, service);
      checker.check(request, reply, payload);
    } catch (err) {
      appendFileSync(
        file,
        `${JSON.stringify({ service, operation: request.url, problems: [`check failed: ${(err as Error).message}`] })}\n`,
      );
    }
    return payload;
  });
}
