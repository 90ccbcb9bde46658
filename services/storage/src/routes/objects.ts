/**
 * Object routes, bucket-named and default-bucket (see object-target.ts for how
 * a path resolves), plus listings. Bodies of these routes are raw bytes: the
 * JSON parser is removed here so a JSON file uploads like any other.
 */
import { durationMs, problemSchema, type RoutePlugin } from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { StorageDeps } from '../app.ts';
import { listObjects, listQuery } from './object-list.ts';
import { defaultBucket, defaultTarget, namedTarget, type Target } from './object-target.ts';
import { deleteObject, downloadObject, headObject, uploadObject } from './object-transfer.ts';
import { bucketKeyParams, bucketParams, errorResponses, keyParams, objectInfoSchema } from './schemas.ts';

type Handler = (deps: StorageDeps, target: Target, request: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

const bytes = z.any().describe('raw object bytes');

const operations: Array<{
  method: 'PUT' | 'GET' | 'HEAD' | 'DELETE';
  summary: string;
  handler: Handler;
  transfer: boolean;
  response: Record<number, z.ZodType>;
}> = [
  {
    method: 'PUT',
    summary: 'Upload an object (streamed; multipart for large bodies; 413 over the size limit)',
    handler: uploadObject,
    transfer: true,
    response: { 201: objectInfoSchema, 413: problemSchema, ...errorResponses },
  },
  {
    method: 'GET',
    summary: 'Download an object (supports Range, If-None-Match, If-Modified-Since)',
    handler: downloadObject,
    transfer: true,
    response: { 200: bytes, 206: bytes, 304: z.null(), 416: problemSchema, ...errorResponses },
  },
  {
    method: 'HEAD',
    summary: "An object's headers: Content-Type, Content-Length, ETag, Last-Modified",
    handler: headObject,
    transfer: false,
    response: { 200: z.null(), 304: z.null(), 404: z.null() },
  },
  {
    method: 'DELETE',
    summary: 'Delete an object',
    handler: deleteObject,
    transfer: false,
    response: { 204: z.null(), ...errorResponses },
  },
];

export const objectRoutes: RoutePlugin<StorageDeps> = async (app, deps) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));
  const transferTimeoutMs = durationMs(deps.config.object_store.transferTimeout);

  app.get(
    '/objects/:bucketName/list',
    {
      exposeHeadRoute: false,
      schema: {
        tags: ['objects'],
        summary: 'List the objects of a bucket',
        params: bucketParams,
        querystring: listQuery,
        response: { 200: z.array(objectInfoSchema), ...errorResponses },
      },
    },
    async (request, reply) => listObjects(deps, request.params.bucketName, request.query, reply),
  );
  app.get(
    '/objects/list',
    {
      exposeHeadRoute: false,
      schema: {
        tags: ['objects (default bucket)'],
        summary: 'List the objects of the default bucket',
        querystring: listQuery,
        response: { 200: z.array(objectInfoSchema), ...errorResponses },
      },
    },
    async (request, reply) => listObjects(deps, defaultBucket(deps.config), request.query, reply),
  );

  for (const op of operations) {
    const config: { timeoutMs?: number } = op.transfer ? { timeoutMs: transferTimeoutMs } : {};
    app.route({
      method: op.method,
      url: '/objects/:bucketName/*',
      exposeHeadRoute: false,
      config,
      schema: { tags: ['objects'], summary: op.summary, params: bucketKeyParams, response: op.response },
      handler: (request, reply) => op.handler(deps, namedTarget(request.params), request, reply),
    });
    app.route({
      method: op.method,
      url: '/objects/*',
      exposeHeadRoute: false,
      config,
      schema: { tags: ['objects (default bucket)'], summary: op.summary, params: keyParams, response: op.response },
      handler: (request, reply) => op.handler(deps, defaultTarget(deps.config, request.params), request, reply),
    });
  }
};
