/**
 * An S3-compatible server (s3rver) on a local folder: the embedded object
 * store of `pnpm start` and the real S3 server of the tests.
 * Requests must be signed with AWS Signature Version 4 (headers or a presigned URL), as S3 requires
 * (s3rver-sigv4.ts); `--allow-anonymous` lets unsigned requests through (the storage benchmark's reference relay).
 * An object or part is stored only once its whole body arrived, as S3 does (s3rver-atomic-writes.ts); copies are made
 * at the store, parts of a multipart upload too (s3rver-copy.ts); conditional writes and deletes are kept
 * (s3rver-conditions.ts).
 * Usage: tsx scripts/dev/s3-server.ts [--port 9000] [--host 127.0.0.1] [--dir .data/s3] [--allow-anonymous]
 */
import { mkdirSync } from 'node:fs';
import { parseArgs } from 'node:util';
import S3rver from 's3rver';
import { answerHelp } from '../lib/usage.ts';
import { addAtomicWrites } from './s3rver-atomic-writes.ts';
import { addConditions } from './s3rver-conditions.ts';
import { addCopies } from './s3rver-copy.ts';
import { addNestedCommonPrefixes } from './s3rver-listing.ts';
import { addMultipartManagement } from './s3rver-multipart.ts';
import { addSuffixRanges } from './s3rver-ranges.ts';
import { addSignatureV4 } from './s3rver-sigv4.ts';

answerHelp(`usage: node --import tsx scripts/dev/s3-server.ts [--port 9000] [--host 127.0.0.1] [--dir .data/s3]
                                                     [--allow-anonymous]

An S3-compatible server (s3rver) on a local folder, checking AWS Signature Version 4 as S3 does (--allow-anonymous
lets unsigned requests through); access key and secret S3RVER. pnpm start's store and the tests' S3 server.`);

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '9000' },
    host: { type: 'string', default: '127.0.0.1' },
    dir: { type: 'string', default: '.data/s3' },
    'allow-anonymous': { type: 'boolean', default: false },
  },
});
mkdirSync(values.dir, { recursive: true });
const server = new S3rver({
  port: Number(values.port),
  address: values.host,
  directory: values.dir,
  silent: true,
  allowMismatchedSignatures: false,
});
addAtomicWrites(server);
addMultipartManagement(server);
addSuffixRanges(server);
addNestedCommonPrefixes(server);
addCopies(server);
addConditions(server);
// Last, so that it runs first: nothing unsigned reaches the other additions.
addSignatureV4(server, { allowAnonymous: values['allow-anonymous'] });
await server.run();
// Idle connections kept well past any client's: a client that reuses one as the server closes it (Node's default 5 s)
// gets a socket hang-up, which an upload's streamed body cannot be sent again after.
const http = (server as unknown as { httpServer: { keepAliveTimeout: number; headersTimeout: number } }).httpServer;
http.keepAliveTimeout = 65_000;
http.headersTimeout = 66_000;
process.stdout.write(`s3rver listening on http://${values.host}:${values.port} (data in ${values.dir})\n`);
const stop = async () => {
  await server.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
