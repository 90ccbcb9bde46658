/**
 * Who may read a service's `/health` through the gateway (`/health/<service>`): operators, known by the address the
 * gateway sees (the gateway is the platform's first hop, so no header a caller writes names it). Every other caller
 * gets a 403 problem (`OPERATORS_ONLY`), as from compose's nginx (deploy/gateway/operators.conf) and the Kubernetes
 * Gateway (SecurityPolicy `operators-only`).
 */
import { BlockList, isIP, isIPv6 } from 'node:net';

/**
 * The operators' networks unless told otherwise: loopback and the private networks, the same list as
 * deploy/gateway/operators.conf (tested). Under `pnpm start` on loopback that is the user at the machine; with
 * `PLATFORM_HOST` open to other machines, a caller from a public address is refused.
 */
export const OPERATOR_NETWORKS: readonly string[] = [
  '127.0.0.0/8',
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '::1',
];

/**
 * A test of an address against `networks` (addresses or CIDRs, IPv4 or IPv6; an IPv4 caller on a dual-stack socket,
 * `::ffff:127.0.0.1`, matches its IPv4 network). A network that is neither throws, naming it.
 */
export function operatorsAt(networks: readonly string[]): (address: string | undefined) => boolean {
  const list = new BlockList();
  for (const network of networks) {
    const { address, prefix, family } = parseNetwork(network);
    if (prefix === undefined) list.addAddress(address, family);
    else list.addSubnet(address, prefix, family);
  }
  return (address) => {
    if (!address) return false;
    return list.check(address, isIPv6(address) ? 'ipv6' : 'ipv4');
  };
}

/**
 * An operators' network as written: an IPv4 or IPv6 address (no zone), alone or with a prefix length of 0-32 or 0-128
 * in decimal digits. Anything else throws, naming it: `10.0.0.0/` is not a /0 that lets every caller in.
 */
export function parseNetwork(network: string): { address: string; prefix?: number; family: 'ipv4' | 'ipv6' } {
  const refused = () => new Error(`operators: ${JSON.stringify(network)} is not an address or a CIDR`);
  const m = /^([0-9A-Fa-f.:]+)(?:\/(\d{1,3}))?$/.exec(network.trim());
  const version = m ? isIP(m[1] as string) : 0;
  if (!m || version === 0) throw refused();
  const prefix = m[2] === undefined ? undefined : Number(m[2]);
  if (prefix !== undefined && prefix > (version === 4 ? 32 : 128)) throw refused();
  return {
    address: m[1] as string,
    ...(prefix === undefined ? {} : { prefix }),
    family: version === 4 ? 'ipv4' : 'ipv6',
  };
}
