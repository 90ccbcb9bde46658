/**
 * Who may read a service's `/health` through the gateway (`/health/<service>`): operators, known by the address the
 * gateway sees (the gateway is the platform's first hop, so no header a caller writes names it). Every other caller
 * gets a 403 problem (`OPERATORS_ONLY`), as from compose's nginx (deploy/gateway/operators.conf) and the Kubernetes
 * Gateway (SecurityPolicy `operators-only`).
 */
import { BlockList, isIPv6 } from 'node:net';

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
    const [address = '', prefix] = network.trim().split('/');
    const family = isIPv6(address) ? 'ipv6' : 'ipv4';
    try {
      if (prefix === undefined) list.addAddress(address, family);
      else list.addSubnet(address, Number(prefix), family);
    } catch {
      throw new Error(`operators: ${JSON.stringify(network)} is not an address or a CIDR`);
    }
  }
  return (address) => {
    if (!address) return false;
    return list.check(address, isIPv6(address) ? 'ipv6' : 'ipv4');
  };
}
