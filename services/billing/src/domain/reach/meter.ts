/**
 * A session's bytes a second through the relay (`reach.max_mib_per_second`): one token bucket per session, shared by
 * all its streams and both directions, holding at most one second's worth. A stream over it is not cut: its source
 * is paused until the bucket has refilled (TCP's and SSH's flow control carry the wait back to the sender).
 */
import { Transform } from 'node:stream';

export class ByteMeter {
  private tokens: number;
  private at: number;

  /** `rate`: bytes a second (0: no limit); `now`: the clock in ms (tests pass their own). */
  constructor(
    private readonly rate: number,
    private readonly now: () => number = Date.now,
  ) {
    this.tokens = rate;
    this.at = now();
  }

  /** Counts `n` bytes passed; how long (ms) their source should wait before more (0: at once). */
  take(n: number): number {
    if (this.rate <= 0) return 0;
    const now = this.now();
    this.tokens = Math.min(this.rate, this.tokens + ((now - this.at) * this.rate) / 1000);
    this.at = now;
    this.tokens -= n;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.rate);
  }
}

/** A stream that passes its bytes on at the meter's pace (for a pipe: the wait holds the writer back). */
export function metered(meter: ByteMeter): Transform {
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      const wait = meter.take(chunk.length);
      if (wait === 0) done(null, chunk);
      else setTimeout(() => done(null, chunk), wait);
    },
  });
}
