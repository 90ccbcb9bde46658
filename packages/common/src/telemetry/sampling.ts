/**
 * Which traces the platform keeps (`OTEL_TRACES_SAMPLER_ARG`, the fraction), decided alike by every hop of a trace and
 * by randomness the platform's edge draws, never by a value a caller chose.
 *
 * The randomness is OpenTelemetry's explicit randomness value: `rv`, 14 hex digits (56 bits) in the `ot` entry of the
 * W3C `tracestate` (`ot=rv:1f2e3d4c5b6a79`); a trace is kept when it is at least the fraction's rejection threshold,
 * (1 - fraction) x 2^56, as OpenTelemetry's consistent probability sampling has it. The gateway draws it for each
 * request it takes (the edge: `withEdgeRandomness`), in place of any `ot` entry the caller sent, and every hop after
 * decides by the value it finds in its parent's `tracestate`, which the trace context carries everywhere the trace goes
 * (calls, outbox events, NATS messages, the session's context a daemon continues). A trace with no `rv` (one a service
 * began, or a caller reached a service without the gateway) is decided by its trace ID (OpenTelemetry's
 * TraceIdRatioBasedSampler), alike everywhere too. A caller's sampled flag decides nothing anywhere. The edge cannot
 * tell a caller that carries the platform's own draw (a daemon's HTTP report on a session) from one that makes up its
 * own: it draws afresh for every request it takes (docs/operations.md, "Traces").
 *
 * Before, the trace ID decided everywhere: a caller that picked its trace IDs picked which requests were kept, and at
 * a fraction below 1 could have every request it sent traced.
 */

import { randomBytes } from 'node:crypto';
import {
  type Attributes,
  type Context,
  createContextKey,
  type Link,
  type Sampler,
  SamplingDecision,
  type SamplingResult,
  type SpanKind,
  type TraceState,
  trace,
} from '@opentelemetry/api';

/** The context key of the randomness the edge drew for the span about to start. */
const EDGE_RANDOMNESS = createContextKey('gpu edge randomness');

/** 14 lowercase hex digits: an `rv` value. */
const RV = /^[0-9a-f]{14}$/;

/** Fresh randomness for a request the edge takes. */
function drawRandomness(): string {
  return randomBytes(7).toString('hex');
}

/**
 * `ctx` for the span of a request entering the platform (the gateway's server span): its trace is kept or not by
 * `randomness` (default: drawn now), whatever the caller's `tracestate` says, and the span's `tracestate` carries it
 * on (`ot=rv:...`, the caller's other entries kept).
 */
export function withEdgeRandomness(ctx: Context, randomness: string = drawRandomness()): Context {
  return ctx.setValue(EDGE_RANDOMNESS, RV.test(randomness) ? randomness : drawRandomness());
}

/**
 * A caller's `tracestate` header as the edge sends it on when it makes no span of its own (tracing off there): its
 * `ot` entry replaced by randomness drawn now, so that the services behind decide the trace by the edge's draw.
 */
export function edgeTraceState(header: string | string[] | undefined): string {
  const text = Array.isArray(header) ? header.join(',') : (header ?? '');
  return withRandomness(text, drawRandomness()).serialize();
}

/** W3C's bounds on a `tracestate`: list members, and characters. */
const MAX_MEMBERS = 32;
const MAX_LENGTH = 512;

/**
 * A `tracestate` of members in order, newest first (OpenTelemetry's TraceState interface, immutable). The platform's
 * own, so that its `ot` entry always fits: the API's and the core's refuse to add an entry to a full list (32 members,
 * or 512 characters) and return the list unchanged, which would send the caller's list on without the edge's draw.
 */
class MemberList implements TraceState {
  constructor(private readonly members: readonly (readonly [string, string])[]) {}

  get(key: string): string | undefined {
    return this.members.find(([k]) => k === key)?.[1];
  }

  set(key: string, value: string): TraceState {
    return new MemberList([[key, value], ...this.members.filter(([k]) => k !== key)]);
  }

  unset(key: string): TraceState {
    return new MemberList(this.members.filter(([k]) => k !== key));
  }

  serialize(): string {
    return this.members.map(([k, v]) => `${k}=${v}`).join(',');
  }
}

/**
 * `state` (a list, or a header's text) with `ot=rv:<randomness>` first and its own `ot` entries gone (however spaced:
 * each member is trimmed as OpenTelemetry's parsers trim it), then as many of its other members as fit W3C's bounds,
 * dropped from the right (the oldest) as W3C has a hop do.
 */
function withRandomness(state: TraceState | string | undefined, randomness: string): TraceState {
  const text = typeof state === 'string' ? state : (state?.serialize() ?? '');
  const members: [string, string][] = [['ot', `rv:${randomness}`]];
  let length = `ot=rv:${randomness}`.length;
  for (const part of text.split(',')) {
    const member = part.trim();
    const at = member.indexOf('=');
    if (at <= 0) continue;
    const key = member.slice(0, at);
    if (key === 'ot' || members.some(([k]) => k === key)) continue;
    if (members.length >= MAX_MEMBERS || length + 1 + member.length > MAX_LENGTH) break;
    members.push([key, member.slice(at + 1)]);
    length += 1 + member.length;
  }
  return new MemberList(members);
}

/** The `rv` of a `tracestate`'s `ot` entry (`ot=th:8;rv:...`: sub-keys separated by `;`), if it has a valid one. */
function randomnessOf(state: TraceState | undefined): string | undefined {
  const ot = state?.get('ot');
  if (!ot) return undefined;
  for (const part of ot.split(';')) {
    if (part.startsWith('rv:')) {
      const value = part.slice(3);
      return RV.test(value) ? value : undefined;
    }
  }
  return undefined;
}

/**
 * The platform's sampler: by the edge's randomness when a span is the edge's (`withEdgeRandomness`), else by the `rv`
 * of the parent's `tracestate`, else as `byTraceId` decides (the SDK's TraceIdRatioBasedSampler at the same fraction).
 */
export class PlatformSampler implements Sampler {
  /** Randomness below this is not kept: (1 - fraction) x 2^56. */
  private readonly threshold: bigint;

  constructor(
    private readonly ratio: number,
    private readonly byTraceId: Sampler,
  ) {
    this.threshold = BigInt(Math.round((1 - ratio) * 2 ** 56));
  }

  /** Whether randomness `rv` (14 hex digits) is kept at the fraction. */
  keeps(rv: string): boolean {
    return BigInt(`0x${rv}`) >= this.threshold;
  }

  shouldSample(
    ctx: Context,
    traceId: string,
    spanName: string,
    spanKind: SpanKind,
    attributes: Attributes,
    links: Link[],
  ): SamplingResult {
    const parentState = trace.getSpanContext(ctx)?.traceState;
    const edge = ctx.getValue(EDGE_RANDOMNESS) as string | undefined;
    if (edge) return { decision: this.decision(edge), traceState: withRandomness(parentState, edge) };
    const rv = randomnessOf(parentState);
    if (rv) return { decision: this.decision(rv) };
    return this.byTraceId.shouldSample(ctx, traceId, spanName, spanKind, attributes, links);
  }

  private decision(rv: string): SamplingDecision {
    return this.keeps(rv) ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD;
  }

  toString(): string {
    return `PlatformSampler{${this.ratio}}`;
  }
}
