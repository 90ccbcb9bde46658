import { S3Client } from '@aws-sdk/client-s3';
import { testEnv } from '@gpu/common/testing';

/** The benchmark's direct path: the SDK against the test environment's s3rver, checksums only where required. */
export function directS3Client(): S3Client {
  return new S3Client({
    endpoint: testEnv.s3Endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: testEnv.s3AccessKey, secretAccessKey: testEnv.s3SecretKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}
