/**
 * Runs the offline sweep periodically on every instance. Instances do not
 * coordinate: the sweep's row locks (SKIP LOCKED + re-check) make each
 * provider's move to `offline` happen, and be published, exactly once.
 */
import type { Logger } from '@gpu/common';
import type { RegistryService } from './registry-service.ts';

export class OfflineSweeper {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    private readonly registry: RegistryService,
    private readonly intervalMs: number,
    private readonly logger: Logger,
  ) {}

  start(): void {
    if (this.timer || this.intervalMs <= 0) return;
    this.timer = setInterval(() => {
      this.running ??= this.sweepOnce().finally(() => {
        this.running = undefined;
      });
    }, this.intervalMs);
    this.timer.unref();
  }

  /** One sweep; failures (the database being down) are logged and the next tick tries again. */
  async sweepOnce(): Promise<void> {
    try {
      const n = await this.registry.sweepOffline();
      if (n > 0) this.logger.info({ providers: n }, 'silent providers marked offline');
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'offline sweep failed; retrying next interval');
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
