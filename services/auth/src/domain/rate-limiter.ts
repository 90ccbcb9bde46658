/**
 * Fixed-window rate limits kept in memory, one counter per (rule, key). A
 * limited caller learns when to retry. Counters live in this instance only:
 * behind N instances a client gets up to N times the limit.
 */
import { errors } from '@gpu/common';

export interface RateRule {
  max: number;
  windowMs: number;
}

interface Window {
  count: number;
  resetAt: number;
}

const SWEEP_EVERY = 1000;

export class RateLimiter {
  private readonly windows = new Map<string, Window>();
  private hitsSinceSweep = 0;

  constructor(
    private readonly enabled: boolean,
    private readonly now: () => number = Date.now,
  ) {}

  /** Throws 429 (with Retry-After) when the key already used up its window. */
  check(rule: RateRule, name: string, key: string): void {
    if (!this.enabled) return;
    const w = this.windows.get(`${name}\u0000${key}`);
    const now = this.now();
    if (w && w.resetAt > now && w.count >= rule.max) throw errors.rateLimited(Math.ceil((w.resetAt - now) / 1000));
  }

  /** Counts one event for the key. */
  hit(rule: RateRule, name: string, key: string): void {
    if (!this.enabled) return;
    const id = `${name}\u0000${key}`;
    const now = this.now();
    const w = this.windows.get(id);
    if (!w || w.resetAt <= now) this.windows.set(id, { count: 1, resetAt: now + rule.windowMs });
    else w.count++;
    if (++this.hitsSinceSweep >= SWEEP_EVERY) this.sweep(now);
  }

  /** Checks, then counts: the usual "N attempts per window". */
  consume(rule: RateRule, name: string, key: string): void {
    this.check(rule, name, key);
    this.hit(rule, name, key);
  }

  private sweep(now: number): void {
    this.hitsSinceSweep = 0;
    for (const [id, w] of this.windows) if (w.resetAt <= now) this.windows.delete(id);
  }
}
