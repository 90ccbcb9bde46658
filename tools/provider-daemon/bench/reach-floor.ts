/**
 * A bare relay for the reach benchmark (bench/reach.ts): one small Node process that passes each connection it
 * accepts to `127.0.0.1:<argv[2]>` and back with the same `relayBytes` billing's relay and the daemon use, and
 * nothing else (no service, a heap of a few MB). Its CPU per GB is what relaying a stream costs in Node at all: the
 * floor under billing's and the daemon's. Prints its port once listening.
 */
import net from 'node:net';
import { relayBytes } from '@gpu/common/byte-relay';

const target = Number(process.argv[2]);
const server = net.createServer({ allowHalfOpen: true }, (client) => {
  const upstream = net.connect({ port: target, host: '127.0.0.1', allowHalfOpen: true, noDelay: true });
  client.setNoDelay(true);
  upstream.once('connect', () => {
    const sides = relayBytes(client, upstream);
    for (const [side, other] of [sides, [...sides].reverse()]) {
      side!.on('error', () => other!.destroy());
      side!.once('close', () => other!.destroy());
    }
  });
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`${(server.address() as net.AddressInfo).port}\n`));
