/**
 * Checking a service's audit trail against its chain (audit-chain.ts): from the anchor (the newest purged event, or
 * the start) to the head, every event must be the next in line (`seq` one more than the last), carry the last one's
 * hash (`prev_hash`), and hash to its own `hash` (recomputed by the database's `audit_event_hash`, the definition the
 * insert trigger used); the last must be the head. The first event where that fails is named, with why:
 *
 * - `altered`: its content no longer hashes to its hash (a field was changed, or it was moved to another place);
 * - `link`: it does not carry the hash of the event before it (that one's hash was rewritten, or it was put there);
 * - `missing`: events are missing before it (deleted from the middle of the chain);
 * - `head`: the chain ends before its recorded head, or at another hash, or goes past it (the newest events were
 *   deleted or replaced, or events were added behind the trigger's back);
 * - `rewritten`: a head kept elsewhere (a logged `seq` and hash, `known`) is not in the chain as it was: that event's
 *   hash differs, or the chain ends before it. Whoever owns the table can recompute every hash from an event on, and
 *   the chain is then consistent with itself: only a hash kept outside the database shows it.
 *
 * Read in one snapshot (REPEATABLE READ), in pages by `seq`: events appended or purged meanwhile change nothing.
 */
import { type Kysely, sql } from 'kysely';

type AuditBreak = 'altered' | 'link' | 'missing' | 'head' | 'rewritten';

export interface AuditChainCheck {
  /** True when every event from the anchor to the head is intact and in place. */
  intact: boolean;
  /** Events checked. */
  events: number;
  /** The newest purged event (0: none), where the check starts, and the newest event, where it ends. */
  anchor_seq: number;
  head_seq: number;
  /** The head's hash (hex): keep it elsewhere, and a later check shows whether the chain up to it was rewritten. */
  head_hash: string;
  /** The first broken link: the event (its `seq` and `id`; `id` null for a missing head), why, and what was found. */
  broken: { seq: number; id: string | null; reason: AuditBreak; detail: string } | null;
  /**
   * The head kept elsewhere that was asked about, and what the chain holds of it: `matches`, `differs` (rewritten),
   * `cut` (the chain ends before it: rewritten), or `purged` (past the retention: nothing left to compare).
   */
  known?: { seq: number; hash: string; found: 'matches' | 'differs' | 'cut' | 'purged' };
}

const PAGE = 5000;

interface Row {
  seq: number;
  id: string;
  prev_hash: string;
  hash: string;
  intact: boolean;
}

/** Checks the chain of `audit_events` (see above), and that it still holds `known` (a head kept elsewhere). */
export async function verifyAuditChain<DB>(
  db: Kysely<DB>,
  known?: { seq: number; hash: string },
): Promise<AuditChainCheck> {
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (trx) => {
      const head = (
        await sql<{ head_seq: number; head_hash: string; anchor_seq: number; anchor_hash: string }>`
          SELECT head_seq::float8 AS head_seq, encode(head_hash, 'hex') AS head_hash,
                 anchor_seq::float8 AS anchor_seq, encode(anchor_hash, 'hex') AS anchor_hash
            FROM audit_chain`.execute(trx)
      ).rows[0]!;
      const check = (broken: AuditChainCheck['broken'], events: number): AuditChainCheck => ({
        intact: broken === null,
        events,
        anchor_seq: head.anchor_seq,
        head_seq: head.head_seq,
        head_hash: head.head_hash,
        broken,
      });
      let lastSeq = head.anchor_seq;
      let lastHash = head.anchor_hash;
      let events = 0;
      for (;;) {
        const { rows } = await sql<Row>`
          SELECT seq::float8 AS seq, id, encode(prev_hash, 'hex') AS prev_hash, encode(hash, 'hex') AS hash,
                 hash = audit_event_hash(seq, id, at, action, outcome, actor_id, actor_kind, actor_credential, address,
                                         target, details, request_id, prev_hash) AS intact
            FROM audit_events WHERE seq > ${lastSeq} ORDER BY seq LIMIT ${PAGE}`.execute(trx);
        for (const row of rows) {
          events++;
          const at = (reason: AuditBreak, detail: string) =>
            check({ seq: row.seq, id: row.id, reason, detail: `event ${row.seq}: ${detail}` }, events);
          if (row.seq > head.head_seq) return at('head', `it is past the head the chain recorded (${head.head_seq})`);
          if (row.seq !== lastSeq + 1) {
            const missing = row.seq - lastSeq - 1;
            return at(
              'missing',
              `${missing} event${missing === 1 ? '' : 's'} before it (from ${lastSeq + 1}) are gone`,
            );
          }
          if (row.prev_hash !== lastHash) return at('link', `it does not carry the hash of event ${lastSeq}`);
          if (!row.intact) return at('altered', 'its content does not hash to its hash');
          lastSeq = row.seq;
          lastHash = row.hash;
        }
        if (rows.length < PAGE) break;
      }
      if (lastSeq !== head.head_seq || lastHash !== head.head_hash) {
        const detail =
          lastSeq < head.head_seq
            ? `the chain ends at event ${lastSeq}, its head is event ${head.head_seq}: the newest events are gone`
            : `event ${lastSeq} is not the head the chain recorded`;
        return check({ seq: head.head_seq, id: null, reason: 'head', detail }, events);
      }
      if (!known) return check(null, events);
      const hash = known.hash.toLowerCase();
      const about = (
        found: NonNullable<AuditChainCheck['known']>['found'],
        broken: AuditChainCheck['broken'] = null,
      ) => ({
        ...check(broken, events),
        known: { seq: known.seq, hash, found },
      });
      const rewritten = (id: string | null, found: 'differs' | 'cut', detail: string) =>
        about(found, { seq: known.seq, id, reason: 'rewritten', detail: `event ${known.seq}: ${detail}` });
      // The newest purged event keeps its hash as the anchor's; older ones are gone.
      if (known.seq === head.anchor_seq) {
        return head.anchor_hash === hash
          ? about('matches')
          : rewritten(null, 'differs', 'the newest purged: its hash is not the one kept elsewhere');
      }
      if (known.seq < head.anchor_seq) return about('purged');
      if (known.seq > head.head_seq) {
        return rewritten(null, 'cut', `the chain ends at event ${head.head_seq}, before it: it was cut back`);
      }
      const held = (
        await sql<{ id: string; hash: string }>`
          SELECT id, encode(hash, 'hex') AS hash FROM audit_events WHERE seq = ${known.seq}`.execute(trx)
      ).rows[0]!;
      return held.hash === hash
        ? about('matches')
        : rewritten(
            held.id,
            'differs',
            'its hash is not the one kept elsewhere: the chain was recomputed from it or before',
          );
    });
}
