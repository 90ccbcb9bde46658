/**
 * What an API key may do. A user makes keys for their programs (auth's `POST /api/v1/auth/keys`), each with scopes;
 * the key is exchanged at auth for a short-lived access token carrying them (`scope`, space-separated, and `key_id`),
 * and every service checks a route's scope against them before anything else (access-control.ts):
 *
 * - a route says in its config the scope that lets an API key call it (`config: { scope: 'sessions' }`); a route
 *   that names none takes no API key at all (creating keys, changing a password, e-mail or roles, signing out);
 * - `read` lets a key call every route that takes keys with GET or HEAD (search offers, read a balance, a
 *   session, a listing), and nothing else; never a route of `connect` (a stream into a workload opens with a GET);
 * - the others let a key call the routes that name them, whatever their method.
 *
 * A token of a user's own sign-in, or of a machine client, carries no scopes: its roles alone decide.
 */
export const SCOPES = [
  'read',
  'offers',
  'sessions',
  'storage:read',
  'storage:write',
  'wallet:read',
  'money:out',
  'machines',
  'connect',
] as const;

export type Scope = (typeof SCOPES)[number];

/** What each scope lets a key do, as the documents and the command line say it. */
export const SCOPE_MEANINGS: Record<Scope, string> = {
  read: 'read-only, but everything the user can read: every GET and HEAD of the routes that take keys (offers, sessions, balances, earnings, listings, and downloading objects)',
  offers: "search offers and quote a machine's prices",
  sessions: 'start and end sessions, with their workloads; read them',
  'storage:read': 'download and list objects, presigned GET URLs',
  'storage:write': 'upload and delete objects, create buckets, presigned PUT URLs',
  'wallet:read': 'read wallets, balances and their history',
  'money:out': 'withdrawals, payouts and setting where payouts go: tokens leave the platform',
  machines: "a provider's machines: register, rates, earnings, and reading payout settings",
  connect:
    "open streams into the user's running workloads (exec, shell): never implied by `read`, though a stream opens with a GET",
};

/** Scopes `read` never stands in for, whatever the method: a stream into a workload opens with a GET. */
const NOT_READ: readonly Scope[] = ['connect'];

export const isScope = (s: string): s is Scope => (SCOPES as readonly string[]).includes(s);

/**
 * Whether a key holding `granted` may call a route of `method` that takes keys with `needed` (one scope, or any of
 * several; none: no key at all).
 */
export function scopeAllows(
  granted: readonly Scope[],
  needed: Scope | readonly Scope[] | undefined,
  method: string,
): boolean {
  if (needed === undefined) return false;
  const any = typeof needed === 'string' ? [needed] : needed;
  if (any.some((s) => granted.includes(s))) return true;
  if (any.some((s) => NOT_READ.includes(s))) return false;
  return granted.includes('read') && (method === 'GET' || method === 'HEAD');
}
