/**
 * Where `pnpm start` puts the platform, for it and for the commands that talk to it (`pnpm demo`): the data folder
 * (PLATFORM_DATA_DIR, default `<repo>/.data`) and the ports (the contract's, or PLATFORM_PORT_BASE + 0..6: services
 * at base+0..3 in contract order, the S3 store at base+4, the Solana RPC at base+5 and its WebSocket at base+6).
 */
import { connect } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

export function platformDataDir(env: NodeJS.ProcessEnv = process.env): string {
  return path.resolve(env.PLATFORM_DATA_DIR ?? path.join(repoRoot, '.data'));
}

export function platformPorts(env: NodeJS.ProcessEnv = process.env) {
  const base = env.PLATFORM_PORT_BASE ? Number(env.PLATFORM_PORT_BASE) : undefined;
  if (base !== undefined && !(Number.isInteger(base) && base > 0 && base < 65529))
    throw new Error(`PLATFORM_PORT_BASE must be a port number, got ${env.PLATFORM_PORT_BASE}`);
  /** The contract's port, or its place after PLATFORM_PORT_BASE. */
  const port = (contractPort: number, offset: number) => (base === undefined ? contractPort : base + offset);
  return {
    auth: port(8000, 0),
    storage: port(8001, 1),
    registry: port(8002, 2),
    billing: port(8003, 3),
    s3: port(9000, 4),
    solana: port(8899, 5),
    solanaWs: port(8900, 6),
  };
}

/** Whether something accepts TCP connections on this port of 127.0.0.1. */
export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
