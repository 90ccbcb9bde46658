/**
 * The benchmark's HTTP/1.1 client: keep-alive connections that read every
 * response into one reused buffer per connection (net's `onread`) and only
 * parse the status line and Content-Length. node:http allocates a fresh 64 KB
 * buffer per read and a stream per response; with 160-280 KB discovery pages
 * that garbage made the client's own collections part of the measured
 * latency tail. One request at a time per connection; the pool opens as many
 * connections as requests run at once. Every request carries an `authorization`
 * header (the service's access control is on, as in production): the
 * client's default token, or the one a request names.
 */
import { connect, type Socket } from 'node:net';

interface Waiter {
  resolve: (status: number) => void;
  reject: (err: Error) => void;
}

const HEADER_END = Buffer.from('\r\n\r\n');

class Connection {
  readonly socket: Socket;
  private waiter?: Waiter;
  /** Header bytes of the current response read so far (copied: the read buffer is reused). */
  private header: Buffer = Buffer.alloc(0);
  /** Body bytes still to come; -1 while the header is being read. */
  private remaining = -1;
  private status = 0;

  constructor(port: number, host: string, readBuffer: Buffer) {
    this.socket = connect({
      port,
      host,
      noDelay: true,
      onread: {
        buffer: readBuffer,
        callback: (n) => {
          this.onRead(readBuffer.subarray(0, n));
          return true;
        },
      },
    });
    this.socket.on('error', (err) => this.fail(err));
    this.socket.on('close', () => this.fail(new Error('connection closed')));
  }

  send(head: string): Promise<number> {
    // Closed while it sat in the pool (the server's keep-alive timeout): a write would never be answered.
    if (this.socket.destroyed) return Promise.reject(new Error('connection closed'));
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      this.socket.write(head);
    });
  }

  private fail(err: Error): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(err);
  }

  private onRead(chunk: Buffer): void {
    let data = chunk;
    while (data.length > 0) {
      if (this.remaining < 0) {
        const joined = this.header.length > 0 ? Buffer.concat([this.header, data]) : data;
        const end = joined.indexOf(HEADER_END);
        if (end < 0) {
          this.header = Buffer.from(joined); // a copy: `data` lives in the reused read buffer
          return;
        }
        this.header = Buffer.alloc(0);
        const head = joined.subarray(0, end).toString('latin1');
        this.status = Number(head.slice(9, 12));
        const length = /\r\ncontent-length: *(\d+)/i.exec(head);
        if (!length && this.status !== 204 && this.status !== 304) {
          this.socket.destroy(new Error('response without Content-Length (chunked bodies are not supported)'));
          return;
        }
        this.remaining = length ? Number(length[1]) : 0;
        data = joined.subarray(end + HEADER_END.length);
      }
      const take = Math.min(this.remaining, data.length);
      this.remaining -= take;
      data = data.subarray(take);
      if (this.remaining === 0) {
        this.remaining = -1;
        const w = this.waiter;
        this.waiter = undefined;
        w?.resolve(this.status);
      }
    }
  }
}

export class BenchHttpClient {
  private readonly idle: Connection[] = [];
  private readonly all: Connection[] = [];

  constructor(
    private readonly port: number,
    /** The default `authorization` header value (`Bearer <token>`); empty sends none. */
    private readonly authorization = '',
    private readonly host = '127.0.0.1',
  ) {}

  /**
   * Sends a request without a body (not HEAD), with `authorization` (`Bearer <token>`) or else the client's default;
   * resolves with the status once the whole body has arrived.
   */
  async request(method: string, path: string, authorization = this.authorization): Promise<number> {
    const conn = this.take();
    const bodyless = method === 'GET' ? '' : 'content-length: 0\r\n';
    const auth = authorization ? `authorization: ${authorization}\r\n` : '';
    try {
      return await conn.send(`${method} ${path} HTTP/1.1\r\nhost: ${this.host}:${this.port}\r\n${auth}${bodyless}\r\n`);
    } finally {
      if (!conn.socket.destroyed) this.idle.push(conn);
    }
  }

  /** Sends a POST with a JSON body; resolves with the status once the whole answer has arrived. */
  async post(path: string, body: string, authorization = this.authorization): Promise<number> {
    const conn = this.take();
    const auth = authorization ? `authorization: ${authorization}\r\n` : '';
    try {
      return await conn.send(
        `POST ${path} HTTP/1.1\r\nhost: ${this.host}:${this.port}\r\n${auth}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    } finally {
      if (!conn.socket.destroyed) this.idle.push(conn);
    }
  }

  close(): void {
    for (const c of this.all) c.socket.destroy();
  }

  /**
   * An idle connection that is still open, else a new one. The service closes a keep-alive connection idle past its
   * timeout (72 s): one left in the pool across a long pause (the benchmark's NATS rows) is dropped here, not written
   * to, where a write was never answered and the benchmark waited for good.
   */
  private take(): Connection {
    for (let conn = this.idle.pop(); conn; conn = this.idle.pop()) if (!conn.socket.destroyed) return conn;
    return this.open();
  }

  private open(): Connection {
    const conn = new Connection(this.port, this.host, Buffer.allocUnsafe(256 * 1024));
    this.all.push(conn);
    return conn;
  }
}
