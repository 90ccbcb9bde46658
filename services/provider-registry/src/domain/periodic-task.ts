/**
 * Work every instance runs on a timer: the offline sweep (every `offline_sweep_interval`) and the walk that keeps the
 * offers' reliability current (every `offers.reliability_refresh`). Instances do not coordinate: the sweep's row
 * locks (SKIP LOCKED + re-check) make each provider's move to `offline` happen, and be published, exactly once, and
 * a refresh writes what the books say, whoever writes it.
 */
import type { Logger } from '@gpu/common';

export class PeriodicTask {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  /** `run` answers what to log (null: nothing worth a line); `what` names the task in the log. */
  constructor(
    private readonly what: string,
    private readonly intervalMs: number,
    private readonly run: () => Promise<Record<string, unknown> | null>,
    private readonly logger: Logger,
  ) {}

  start(): void {
    if (this.timer || this.intervalMs <= 0) return;
    this.timer = setInterval(() => {
      this.running ??= this.runOnce().finally(() => {
        this.running = undefined;
      });
    }, this.intervalMs);
    this.timer.unref();
  }

  /** One run; failures (the database being down) are logged and the next tick tries again. */
  async runOnce(): Promise<void> {
    try {
      const done = await this.run();
      if (done) this.logger.info(done, `${this.what} done`);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, `${this.what} failed; retrying next interval`);
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
