/**
 * The gateway's own way into a service (`server.gateway_socket`): a Unix socket, in a folder only the service's user
 * can open, on which the service takes the client's address from `X-Forwarded-For`. No caller over TCP can name its
 * address that way unless `server.trusted_proxies` names the caller; only a process that can open the folder can.
 *
 * Under `pnpm start` every caller, the gateway included, comes from 127.0.0.1, so trusting an address would trust
 * every caller: a forged `X-Forwarded-For` sent to a service made each request count as a new client for auth's
 * per-address limits. A path in a private folder tells the gateway from the rest: the gateway connects there (and
 * writes the caller's real address over anything the caller sent), everyone else comes by TCP and counts as the
 * address it connects from. The folder is the platform's data folder's, mode 0700: who can open it can also read
 * the platform's secrets beside it (signing key, client secrets, the admin's password).
 */
import { chmodSync, lstatSync, mkdirSync, statSync, unlinkSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';

/**
 * The longest Unix socket path every system takes (sockaddr_un holds 104 bytes on macOS, 108 on Linux, with the
 * terminating NUL).
 */
export const MAX_SOCKET_PATH_BYTES = 103;

/** The connections that came through a gateway socket (only those: TCP connections are never in it). */
const gatewayConnections = new WeakSet<Socket>();

/** Whether a request's connection came through the service's gateway socket. */
export function viaGatewaySocket(socket: Socket | undefined): boolean {
  return socket !== undefined && gatewayConnections.has(socket);
}

/** Refuses a socket folder anyone but this user could open (or that another user owns). */
function checkPrivateFolder(folder: string): void {
  mkdirSync(folder, { recursive: true, mode: 0o700 });
  const stat = statSync(folder);
  const uid = process.getuid?.();
  const mode = (stat.mode & 0o777).toString(8).padStart(3, '0');
  if (!stat.isDirectory() || (stat.mode & 0o077) !== 0 || (uid !== undefined && stat.uid !== uid)) {
    throw new Error(
      `server.gateway_socket: the folder ${folder} must be this user's alone (mode 0700), not mode ${mode} of uid ${stat.uid}`,
    );
  }
}

/**
 * Removes a socket that a process before this one left at `socketPath` (one killed before it could): only a socket
 * that nothing answers on; one in use, or anything but a socket, is refused.
 */
async function removeStaleSocket(socketPath: string): Promise<void> {
  let stat: ReturnType<typeof lstatSync>;
  try {
    stat = lstatSync(socketPath);
  } catch {
    return;
  }
  if (!stat.isSocket()) throw new Error(`server.gateway_socket: ${socketPath} exists and is not a socket`);
  const answered = await new Promise<boolean>((resolve) => {
    const probe = connect(socketPath);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (answered) throw new Error(`server.gateway_socket: another process answers on ${socketPath}`);
  unlinkSync(socketPath);
}

/**
 * Has the app's HTTP server also answer on a Unix socket at `socketPath` (its folder made, or checked to be, this
 * user's alone), marking each connection as the gateway's. Call it once the app listens; close the returned server
 * (before the app) to stop accepting.
 */
export async function listenForGateway(app: FastifyInstance, socketPath: string): Promise<Server> {
  checkPrivateFolder(path.dirname(socketPath));
  await removeStaleSocket(socketPath);
  const server = createServer((socket) => {
    gatewayConnections.add(socket);
    // Node's HTTP server takes a connection handed to it: the same routes, hooks and limits as on its port.
    app.server.emit('connection', socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  chmodSync(socketPath, 0o600);
  return server;
}
