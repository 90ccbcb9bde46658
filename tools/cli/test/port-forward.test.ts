/**
 * `gpu port-forward`'s parts that need no platform: its port specs (a usage error, exit status 2, before anything is
 * sent), and the byte bridges reach streams ride on, against local servers speaking the contract of billing's
 * port-forward stream: the WebSocket one (`ssh-proxy`'s: bytes both ways, close 1000 the end) and the raw one
 * (`port-forward`'s, `Upgrade: tcp`: the bytes as they are, the end its end); a refusal an HTTP answer with a problem
 * body. Megabytes both ways through a reader slower than the sender, the end, a break, a refusal.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { ApiError, staticToken } from '@gpu/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { WebSocketServer } from 'ws';
import { UsageError } from '../src/cli.ts';
import { parsePortSpec, parsePortSpecs } from '../src/commands/port-forward.ts';
import { bridge, bridgeRaw } from '../src/reach-stream.ts';
import { CLI_TEST_MS, gpuAt } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const SESSION = '3f0c5b8e-3a55-4d47-9a3c-3c1f7c1c9d11';

describe('port specs', () => {
  it('reads <remote>[:<local>], the local port the remote one by default, 0 any free one', () => {
    expect(parsePortSpec('8888')).toEqual({ remote: 8888, local: 8888 });
    expect(parsePortSpec('8888:9000')).toEqual({ remote: 8888, local: 9000 });
    expect(parsePortSpec('6006:0')).toEqual({ remote: 6006, local: 0 });
    expect(parsePortSpec('65535:1')).toEqual({ remote: 65535, local: 1 });
    expect(parsePortSpecs(['8888', '6006:0', '22:0'])).toHaveLength(3);
  });

  it('refuses what is not a port, out of range, or a local port named twice', () => {
    for (const bad of ['', 'abc', '0', '65536', '8888:65536', '-1', '8888:', ':8888', '88 88', '1:2:3', '123456']) {
      expect(() => parsePortSpec(bad), bad).toThrow(UsageError);
    }
    expect(() => parsePortSpecs(['8888', '9999:8888'])).toThrow(/local port 8888 is named twice/);
  });

  it('is a usage error of the command line, exit status 2, nothing sent', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-pf-'));
    try {
      // Nothing listens at this URL: a run that sent anything would fail otherwise (exit status 1).
      const gpu = gpuAt('http://127.0.0.1:9', join(dir, 'config'));
      const outOfRange = await gpu(['port-forward', SESSION, '70000']);
      expect(outOfRange).toMatchObject({ code: 2, stdout: '' });
      expect(outOfRange.stderr).toMatch(/^gpu: "70000": the workload's port is from 1 to 65535\n$/);
      expect((await gpu(['port-forward', SESSION, '8888:x'])).code).toBe(2);
      expect((await gpu(['port-forward', SESSION])).code).toBe(2);
      const address = await gpu(['port-forward', SESSION, '8888', '--address', 'my laptop']);
      expect(address).toMatchObject({ code: 2, stderr: expect.stringContaining('--address takes an IP address') });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the byte bridge of a reach stream', () => {
  let server: http.Server;
  let url = '';
  const ctx = () => ({ url, token: staticToken('a-token') });

  beforeAll(async () => {
    const wss = new WebSocketServer({ noServer: true });
    server = http.createServer();
    server.on('upgrade', (req, socket, head) => {
      const u = new URL(req.url ?? '/', 'http://x');
      const port = u.searchParams.get('port');
      if (req.headers.authorization !== 'Bearer a-token' || port === '1') {
        const body = JSON.stringify({
          code: 'PORT_NOT_LISTENING',
          detail: 'nothing listens on port 1 in the workload',
        });
        socket.end(
          `HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/problem+json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        );
        return;
      }
      wss.handleUpgrade(req, socket, head, (ws) => {
        // Port 2 greets first, then breaks; any other echoes until the client ends, then ends with 1000.
        if (port === '2') {
          ws.send(Buffer.from('hello'));
          setTimeout(() => ws.close(4001, 'the machine went away'), 50);
          return;
        }
        ws.on('message', (data: Buffer) => ws.send(data));
        ws.on('close', () => undefined);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('carries megabytes both ways to a slow reader intact, then ends with 1000 once the local side ended', async () => {
    const sent = randomBytes(24 * 1024 * 1024);
    const input = new PassThrough();
    const chunks: Buffer[] = [];
    // A reader that takes 64 KiB at a time, now and then: the stream must wait for it, not buffer without bound.
    const output = new Writable({
      highWaterMark: 64 * 1024,
      write(chunk: Buffer, _enc, done) {
        chunks.push(chunk);
        setImmediate(done);
      },
    });
    const ended = bridge(ctx(), `/stream?port=8888`, { input, output }, { lingerMs: 200 });
    for (let at = 0; at < sent.length; at += 1024 * 1024) {
      if (!input.write(sent.subarray(at, at + 1024 * 1024))) {
        await new Promise((resolve) => input.once('drain', resolve));
      }
    }
    input.end();
    expect(await ended).toEqual({ code: 1000, reason: '' });
    expect(Buffer.concat(chunks).equals(sent)).toBe(true);
  });

  it('passes what came before a break, and says how it broke', async () => {
    const input = new PassThrough();
    let got = '';
    const output = new Writable({
      write(chunk: Buffer, _enc, done) {
        got += String(chunk);
        done();
      },
    });
    expect(await bridge(ctx(), `/stream?port=2`, { input, output })).toEqual({
      code: 4001,
      reason: 'the machine went away',
    });
    expect(got).toBe('hello');
  });

  it("rejects a refusal with the platform's problem, and closes itself when told to stop", async () => {
    const refused = bridge(ctx(), `/stream?port=1`, { input: new PassThrough(), output: new PassThrough() });
    await expect(refused).rejects.toBeInstanceOf(ApiError);
    await expect(refused).rejects.toMatchObject({ status: 502, code: 'PORT_NOT_LISTENING' });

    const stop = new AbortController();
    const open = bridge(
      ctx(),
      `/stream?port=8888`,
      { input: new PassThrough(), output: new PassThrough() },
      { signal: stop.signal },
    );
    setTimeout(() => stop.abort(), 100);
    expect((await open).code).toBe(1001);

    // A local side gone before the stream opened (a connection reset at once) closes the stream as soon as it opens.
    const gone = new PassThrough();
    const closing = bridge(ctx(), `/stream?port=8888`, { input: gone, output: gone });
    gone.destroy();
    expect(await closing).toEqual({ code: 1001, reason: 'local side closed' });
  });
});

describe('the raw byte bridge of a forwarded port', () => {
  let server: http.Server;
  let url = '';
  const ctx = () => ({ url, token: staticToken('a-token') });
  /** Local connections: the app's end, and the one the bridge is given. */
  let local: net.Server;
  const accepted: net.Socket[] = [];
  /** Every socket either server made, closed at the end. */
  const made: net.Socket[] = [];
  const pair = async (): Promise<{ app: net.Socket; bridged: net.Socket }> => {
    const app = net.connect((local.address() as AddressInfo).port, '127.0.0.1');
    await new Promise((resolve) => app.once('connect', resolve));
    await expect.poll(() => accepted.length, { timeout: 20_000 }).toBeGreaterThan(0);
    return { app, bridged: accepted.shift()! };
  };

  beforeAll(async () => {
    server = http.createServer();
    server.on('upgrade', (req, socket: net.Socket) => {
      made.push(socket);
      const port = new URL(req.url ?? '/', 'http://x').searchParams.get('port');
      if (req.headers.authorization !== 'Bearer a-token' || req.headers.upgrade !== 'tcp' || port === '1') {
        const body = JSON.stringify({ code: 'PORT_NOT_LISTENING', detail: 'nothing listens on port 1' });
        socket.end(
          `HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/problem+json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        );
        return;
      }
      socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n');
      // Port 2 greets first, then is cut; any other echoes until the client ends, then ends.
      if (port === '2') {
        socket.write('hello');
        setTimeout(() => socket.resetAndDestroy(), 50);
        return;
      }
      socket.pipe(socket);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    // As `gpu port-forward` listens: a local client's end is its half-close.
    local = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (s) => {
      made.push(s);
      accepted.push(s);
    });
    await new Promise<void>((resolve) => local.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    for (const s of made) s.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await new Promise<void>((resolve) => local.close(() => resolve()));
  });

  it('carries megabytes both ways to a slow reader intact, then ends once the local side ended', async () => {
    const { app, bridged } = await pair();
    const sent = randomBytes(24 * 1024 * 1024);
    const chunks: Buffer[] = [];
    // A reader that takes a chunk now and then: the stream must wait for it, not buffer without bound.
    app.on('data', (d: Buffer) => {
      chunks.push(d);
      app.pause();
      setTimeout(() => app.resume(), 1);
    });
    const ended = bridgeRaw(ctx(), '/stream?port=8888', bridged, { lingerMs: 200 });
    const appEnded = new Promise((resolve) => app.once('end', resolve));
    app.end(sent);
    const end = await ended;
    expect(end).toEqual({ code: 1000, reason: '' });
    bridged.end();
    await appEnded;
    expect(Buffer.concat(chunks).equals(sent)).toBe(true);
  });

  it('passes what came before a cut, and says it was cut', async () => {
    const { app, bridged } = await pair();
    let got = '';
    app.on('data', (d: Buffer) => {
      got += String(d);
    });
    expect(await bridgeRaw(ctx(), '/stream?port=2', bridged)).toEqual({ code: 1006, reason: 'the stream was cut' });
    await expect.poll(() => got, { timeout: 20_000 }).toBe('hello');
    app.destroy();
  });

  it("rejects a refusal with the platform's problem, and closes itself when told to stop", async () => {
    const first = await pair();
    const refused = bridgeRaw(ctx(), '/stream?port=1', first.bridged);
    await expect(refused).rejects.toBeInstanceOf(ApiError);
    await expect(refused).rejects.toMatchObject({ status: 502, code: 'PORT_NOT_LISTENING' });
    first.app.destroy();

    const second = await pair();
    const stop = new AbortController();
    const open = bridgeRaw(ctx(), '/stream?port=8888', second.bridged, { signal: stop.signal });
    setTimeout(() => stop.abort(), 100);
    expect((await open).code).toBe(1001);
    second.app.destroy();

    // A local side gone before the stream opened (a connection reset at once) closes the stream as soon as it opens.
    const third = await pair();
    const closing = bridgeRaw(ctx(), '/stream?port=8888', third.bridged);
    third.bridged.destroy();
    expect(await closing).toEqual({ code: 1001, reason: 'local side closed' });
    third.app.destroy();
  });
});
