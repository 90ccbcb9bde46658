/**
 * The provider registry's named errors. Each carries a kind, never an HTTP
 * status; the common error handler turns them into problem bodies.
 */
import { AppError, errors } from '@gpu/common';

/**
 * A heartbeat's metrics name a GPU index the provider does not have; nothing is written. The route that read the
 * metrics names the request field (`at`).
 */
export class UnknownGpuIndex extends AppError {
  constructor(
    readonly index: number,
    readonly gpuCount: number,
  ) {
    super('invalid', 'UNKNOWN_GPU_INDEX', `gpu_metrics names GPU index ${index}, the provider has ${gpuCount} GPU(s)`);
  }

  /** The same error, naming the request field the metrics came from. */
  at(path: string): AppError {
    return new AppError(this.kind, this.code, this.message, {
      errors: [{ path, message: `index ${this.index} is not in 0..${this.gpuCount - 1}` }],
    });
  }
}

export const registryErrors = {
  /** `ErrProviderNotFound`. */
  providerNotFound: (id: string) => errors.notFound('PROVIDER_NOT_FOUND', `provider ${id} not found`),
  /** `ErrProviderAlreadyExists`: the owner already has a provider with this name. */
  providerAlreadyExists: (ownerId: string, name: string) =>
    errors.conflict('PROVIDER_ALREADY_EXISTS', `owner ${ownerId} already has a provider named ${JSON.stringify(name)}`),
  /** A session reported as running has ended already (an ended session never runs again). */
  sessionEnded: (sessionId: string) =>
    errors.conflict('SESSION_ENDED', `session ${sessionId} has ended; it cannot run again`),
  /**
   * An explicit status change that contradicts the provider's rental sessions (`domain/gpu-holds.ts`):
   * `idle` while it is fully rented, or `busy` while it is not. `providerId` is null for a registration.
   */
  gpusRented: (providerId: string) =>
    errors.conflict(
      'GPUS_RENTED',
      `provider ${providerId} has rental sessions holding its GPUs by their place in its GPU list: the list's GPUs ` +
        'cannot be added, removed or reordered until they end (other fields, and VRAM, power or health, can change)',
    ),
  statusContradictsSessions: (providerId: string, status: string) =>
    errors.conflict(
      'STATUS_CONTRADICTS_SESSIONS',
      `provider ${providerId} is fully rented (billing's leases hold every GPU group it could rent): it cannot ` +
        `be set ${status}; only billing's statements of held GPUs move a rented machine back to idle, when GPUs ` +
        'are freed (offline, maintenance or error take it off the market and end its sessions)',
    ),
  unknownGpuIndex: (index: number, gpuCount: number) => new UnknownGpuIndex(index, gpuCount),
  idMismatch: (pathId: string, bodyId: string) =>
    new AppError('invalid', 'ID_MISMATCH', `body id ${bodyId} differs from path id ${pathId}`, {
      errors: [{ path: 'body.id', message: 'must equal the path parameter providerID' }],
    }),
};
