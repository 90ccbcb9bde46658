/** The provider registry's named errors; the common error handler turns them into problem bodies. */
import { AppError, errors } from '@gpu/common';

export const registryErrors = {
  /** `ErrProviderNotFound`. */
  providerNotFound: (id: string) => errors.notFound('PROVIDER_NOT_FOUND', `provider ${id} not found`),
  /** `ErrProviderAlreadyExists`: the owner already has a provider with this name. */
  providerAlreadyExists: (ownerId: string, name: string) =>
    errors.conflict('PROVIDER_ALREADY_EXISTS', `owner ${ownerId} already has a provider named ${JSON.stringify(name)}`),
  invalidCursor: (detail: string) =>
    new AppError('invalid', 'INVALID_CURSOR', `invalid cursor: ${detail}`, {
      errors: [{ path: 'querystring.cursor', message: detail }],
    }),
  unknownGpuIndex: (index: number, count: number) =>
    new AppError(
      'invalid',
      'UNKNOWN_GPU_INDEX',
      `gpu_metrics names GPU index ${index}, the provider has ${count} GPU(s)`,
      {
        errors: [{ path: 'body.gpu_metrics', message: `index ${index} is not in 0..${count - 1}` }],
      },
    ),
  idMismatch: (pathId: string, bodyId: string) =>
    new AppError('invalid', 'ID_MISMATCH', `body id ${bodyId} differs from path id ${pathId}`, {
      errors: [{ path: 'body.id', message: 'must equal the path parameter providerID' }],
    }),
};
