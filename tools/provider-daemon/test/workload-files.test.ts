/**
 * A workload's files move through the renter's storage on grants for its session, never through the daemon's own
 * credentials: its inputs appear read-only in /work/inputs, its logs can be read in storage while it runs and after,
 * and what it leaves in /work/output is uploaded under its output prefix, and nothing outside it. Against the real
 * auth service, registry, billing, storage (on the tests' S3 server), bubblewrap and (an image's) Podman.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openBeneath } from '../src/workloads/files.ts';
import { WorkloadRunner } from '../src/workloads/runner.ts';
import { containerSettings, testImage } from './support/containers.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

// A short upload window, so that a test sees it close.
const WINDOW_MS = 15_000;
const rig = useWorkloadRig({ storage: true, billing: { billing: { workload_upload_window: `${WINDOW_MS}ms` } } });

/** An object of the renter's folder, through the storage service with the renter's own token. */
async function read(headers: Record<string, string>, key: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${rig.storage.url}/objects/${encodeURIComponent(key)}`, { headers });
  return { status: res.status, text: await res.text() };
}

async function upload(headers: Record<string, string>, key: string, body: string): Promise<void> {
  const res = await fetch(`${rig.storage.url}/objects/${encodeURIComponent(key)}`, { method: 'PUT', headers, body });
  expect(res.status, await res.text()).toBe(201);
}

/**
 * A renter's `data/in.txt` (`hello from storage`) as the input of `workload` on one GPU of a new machine (its
 * `workloads` settings), run until its outputs are uploaded: the workload as its renter then reads it.
 */
async function runWithInput(workloads: Record<string, unknown>, workload: object) {
  const m = await rig.machine(workloads);
  const renter = await rig.renter();
  await upload(renter.headers, 'data/in.txt', 'hello from storage\n');
  const r = await rig.rent(
    m.providerId,
    1,
    { ...workload, max_runtime_seconds: 60, inputs: [{ key: 'data/in.txt' }] },
    renter,
  );
  const runner = m.runner();
  runner.run();
  try {
    const ended = await until(
      () => rig.workloadOf(r.headers, r.id),
      (w) => w.outputs !== null,
      20_000,
    );
    return { ended, prefix: `sessions/${r.id}/`, renter };
  } finally {
    await runner.stop();
  }
}

describe("a workload's files", () => {
  it('reads its inputs read-only, keeps its logs and uploads its outputs under the prefix only', async () => {
    const { ended, prefix, renter } = await runWithInput(
      {},
      {
        command: [
          'sh',
          '-c',
          [
            'cat /work/inputs/data/in.txt',
            '(echo changed > /work/inputs/data/in.txt) 2>/dev/null || echo inputs-read-only',
            'echo to-stderr >&2',
            'cp /work/inputs/data/in.txt /work/output/copy.txt',
            'mkdir -p /work/output/sub && echo nested > /work/output/sub/deep.txt',
            // A link to a file of the host's, and one out of the sandbox: neither is followed at upload.
            'ln -s /etc/hostname /work/output/host-link && ln -s ../../.. /work/output/escape',
          ].join('; '),
        ],
      },
    );
    expect(ended).toMatchObject({
      state: 'exited',
      exit_code: 0,
      spec: { output: { prefix } },
      logs: { stdout: `${prefix}logs/stdout.log`, stderr: `${prefix}logs/stderr.log` },
    });
    expect(ended.outputs).toEqual([
      { key: `${prefix}output/copy.txt`, size: 19 },
      { key: `${prefix}output/sub/deep.txt`, size: 7 },
    ]);
    expect(await read(renter.headers, `${prefix}logs/stdout.log`)).toEqual({
      status: 200,
      text: 'hello from storage\ninputs-read-only\n',
    });
    expect((await read(renter.headers, `${prefix}logs/stderr.log`)).text).toBe('to-stderr\n');
    expect((await read(renter.headers, `${prefix}output/copy.txt`)).text).toBe('hello from storage\n');
    expect((await read(renter.headers, `${prefix}output/sub/deep.txt`)).text).toBe('nested\n');
    // The links were not followed: nothing of the host's reached storage; the session says what was not kept.
    expect((await read(renter.headers, `${prefix}output/host-link`)).status).toBe(404);
    expect(ended.outputs_refused).toEqual([
      { path: 'escape', reason: 'symbolic_link' },
      { path: 'host-link', reason: 'symbolic_link' },
    ]);
    // The input is as it was.
    expect((await read(renter.headers, 'data/in.txt')).text).toBe('hello from storage\n');
  });

  it('gives an image in a container the same: inputs read-only, its logs kept, its outputs uploaded', async () => {
    const { ended, prefix, renter } = await runWithInput(containerSettings, {
      image: testImage,
      command: [
        '/bin/busybox',
        'sh',
        '-c',
        [
          'cat /work/inputs/data/in.txt',
          '(echo changed > /work/inputs/data/in.txt) 2>/dev/null || echo inputs-read-only',
          'echo to-stderr >&2',
          '/bin/busybox cp /work/inputs/data/in.txt /work/output/copy.txt',
        ].join('; '),
      ],
    });
    expect(ended).toMatchObject({ state: 'exited', exit_code: 0 });
    expect(ended.outputs).toEqual([{ key: `${prefix}output/copy.txt`, size: 19 }]);
    expect((await read(renter.headers, `${prefix}logs/stdout.log`)).text).toBe(
      'hello from storage\ninputs-read-only\n',
    );
    expect((await read(renter.headers, `${prefix}logs/stderr.log`)).text).toBe('to-stderr\n');
    expect((await read(renter.headers, `${prefix}output/copy.txt`)).text).toBe('hello from storage\n');
  });

  it('shows the logs in storage a few seconds behind while the workload runs', async () => {
    const m = await rig.machine();
    const r = await rig.rent(m.providerId, 1, {
      command: ['sh', '-c', 'echo first line; sleep 3600'],
      max_runtime_seconds: 3600,
    });
    const runner = m.runner();
    runner.run();
    try {
      const live = await until(
        () => read(r.headers, `sessions/${r.id}/logs/stdout.log`),
        (o) => o.text === 'first line\n',
      );
      expect(live).toEqual({ status: 200, text: 'first line\n' });
      expect((await rig.workloadOf(r.headers, r.id)).state).toBe('running');
    } finally {
      await runner.stop();
    }
  });

  it("refuses a start naming another user's objects, a missing one, or a prefix that escapes, moving no money", async () => {
    const m = await rig.machine();
    const victim = await rig.renter();
    await upload(victim.headers, 'secret.txt', 'not yours');
    const attacker = await rig.renter();
    const balance = async () =>
      (
        await rig.billing.app.inject({ url: `/api/v1/wallet/${attacker.walletId}/balance`, headers: attacker.headers })
      ).json();
    const before = await balance();
    const bucket = rig.storage.config.object_store.default_bucket;
    const run = (workload: object) =>
      rig.start(m.providerId, 1, { command: ['true'], max_runtime_seconds: 60, ...workload }, attacker);

    const stolen = await run({ inputs: [{ bucket, key: `users/${victim.id}/secret.txt` }] });
    expect(stolen.statusCode, stolen.body).toBe(403);
    expect(stolen.json().code).toBe('FOLDER_NOT_OWNED');
    const intoTheirs = await run({ output: { bucket, prefix: `users/${victim.id}/drop/` } });
    expect(intoTheirs.statusCode).toBe(403);
    const missing = await run({ inputs: [{ key: `nothing-${randomUUID()}.bin` }] });
    expect(missing.statusCode).toBe(404);
    for (const prefix of ['../escape/', '/abs/', 'a/../../b/']) {
      const bad = await run({ output: { prefix } });
      expect(bad.statusCode, prefix).toBe(400);
      expect(bad.json().errors[0].path).toContain('output');
    }
    const badInput = await run({ inputs: [{ key: 'x', path: '../../etc/passwd' }] });
    expect(badInput.statusCode).toBe(400);
    expect(await balance()).toEqual(before);
    // No session was started, so no GPU was leased.
    const sessions = await rig.billing.app.inject({ url: '/api/v1/billing/sessions', headers: attacker.headers });
    expect(sessions.json()).toEqual([]);
    expect(intoTheirs.json().code).toBe('FOLDER_NOT_OWNED');
  });

  it('grants files only to the machine of the session, and never a path outside its prefix', async () => {
    const m = await rig.machine();
    const other = await rig.machine();
    const r = await rig.rent(m.providerId, 1, { command: ['sleep', '3600'], max_runtime_seconds: 3600 });
    const daemon = async (machine: typeof m) => ({ authorization: `Bearer ${await machine.deps.token.get()}` });
    const grant = async (headers: Record<string, string>, outputs: string[] = []) =>
      rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/sessions/${r.id}/workload/grants`,
        headers,
        payload: { outputs },
      });
    const own = await grant(await daemon(m), ['result.bin']);
    expect(own.statusCode, own.body).toBe(200);
    expect(own.json().outputs[0]).toMatchObject({ key: `sessions/${r.id}/output/result.bin`, path: 'result.bin' });
    expect((await grant(await daemon(other))).statusCode).toBe(403);
    expect((await grant(r.headers)).statusCode).toBe(403);
    for (const path of ['../../elsewhere.bin', '/etc/passwd', 'a/./b']) {
      const bad = await grant(await daemon(m), [path]);
      expect(bad.statusCode, path).toBe(400);
    }
    // A write grant is for its one object: the URL cannot read it, nor write another key.
    const url = new URL(own.json().outputs[0].url);
    expect((await fetch(url, { method: 'GET' })).status).toBe(403);
    url.pathname = url.pathname.replace('result.bin', 'other.bin');
    expect((await fetch(url, { method: 'PUT', body: 'x' })).status).toBe(403);
  });

  it('uploads nothing of the host when the workload replaced its output directory with a link', async () => {
    const m = await rig.machine();
    const r = await rig.rent(m.providerId, 1, {
      command: ['sh', '-c', 'rm -rf /work/output && ln -s /etc /work/output && echo swapped'],
      max_runtime_seconds: 60,
    });
    const runner = m.runner();
    runner.run();
    try {
      await until(
        () => rig.workloadOf(r.headers, r.id),
        (w) => w.state === 'exited',
      );
      // The daemon is done with the session once its directory is gone (its logs uploaded).
      await until(
        async () => existsSync(join(m.runDir, r.id)),
        (present) => !present,
        20_000,
      );
      expect(existsSync(join(m.runDir, r.id))).toBe(false);
      const w = await rig.workloadOf(r.headers, r.id);
      expect(w).toMatchObject({
        state: 'exited',
        exit_code: 0,
        outputs: [],
        outputs_refused: [{ path: '.', reason: 'output_not_a_directory' }],
      });
      expect((await read(r.headers, `sessions/${r.id}/logs/stdout.log`)).text).toBe('swapped\n');
      const listed = await fetch(
        `${rig.storage.url}/objects/list?prefix=${encodeURIComponent(`sessions/${r.id}/output/`)}`,
        { headers: r.headers },
      );
      expect(await listed.json()).toEqual([]);
    } finally {
      await runner.stop();
    }
  });

  it('uploads every output the store takes though one is refused, and names each file not kept with why', async () => {
    const m = await rig.machine();
    // A name of 250 bytes: more than the store can hold as one path segment.
    const long = `${'n'.repeat(246)}.txt`;
    const r = await rig.rent(m.providerId, 1, {
      command: [
        'sh',
        '-c',
        `cd /work/output && echo a > a.txt && echo long > ${long} && echo z > z.txt && ln -s /etc/passwd link`,
      ],
      max_runtime_seconds: 60,
    });
    const runner = m.runner();
    runner.run();
    try {
      const w = await until(
        () => rig.workloadOf(r.headers, r.id),
        (x) => x.outputs !== null,
        60_000,
      );
      const prefix = `sessions/${r.id}/output/`;
      expect(w.outputs).toEqual([
        { key: `${prefix}a.txt`, size: 2 },
        { key: `${prefix}z.txt`, size: 2 },
      ]);
      expect(w.outputs_refused).toEqual([
        { path: 'link', reason: 'symbolic_link' },
        { path: long, reason: expect.stringMatching(/^(store|name)_refused: /) },
      ]);
      expect((await read(r.headers, `${prefix}z.txt`)).text).toBe('z\n');
    } finally {
      await runner.stop();
    }
  }, 90_000);

  it('a daemon started again uploads what its earlier life left and removes the session directory once done', async () => {
    const m = await rig.machine();
    const r = await rig.rent(m.providerId, 1, {
      command: ['sh', '-c', 'echo step-41 > /work/output/checkpoint.txt; sleep 3600'],
      max_runtime_seconds: 3600,
    });
    // The first life: once it is dead, nothing it would say reaches billing.
    let dead = false;
    const first = new WorkloadRunner({
      ...m.deps,
      token: { get: () => (dead ? Promise.reject(new Error('this daemon is dead')) : m.deps.token.get()) },
    });
    await first.sync();
    await until(
      () => rig.workloadOf(r.headers, r.id),
      (w) => w.state === 'running',
    );
    // The checkpoint is written (in the session's own filesystem, kept on the machine's disk).
    await until(
      async () => existsSync(join(m.runDir, r.id, 'fs', 'work', 'output', 'checkpoint.txt')),
      (written) => written,
    );
    // The daemon dies (here: its runner is dropped without a word, its sandbox left running, which the next life
    // kills): the next life finds what it left on disk.
    dead = true;
    const second = m.runner();
    try {
      await second.sync();
      const w = await until(
        () => rig.workloadOf(r.headers, r.id),
        (x) => x.outputs !== null,
        30_000,
      );
      expect(w).toMatchObject({ state: 'stopped', reason: 'daemon_restarted' });
      expect(w.outputs).toEqual([{ key: `sessions/${r.id}/output/checkpoint.txt`, size: 8 }]);
      expect((await read(r.headers, `sessions/${r.id}/output/checkpoint.txt`)).text).toBe('step-41\n');
      // Nothing of the session stays on the machine once its files are kept.
      await until(
        async () => existsSync(join(m.runDir, r.id)),
        (present) => !present,
        20_000,
      );
    } finally {
      await first.stop();
      await second.stop();
    }
  }, 90_000);

  it('grants inputs only until the workload runs, and nothing once the upload window after its end closed', async () => {
    const m = await rig.machine();
    const renter = await rig.renter();
    await upload(renter.headers, 'in.bin', 'input');
    const r = await rig.rent(
      m.providerId,
      1,
      { command: ['sleep', '1'], max_runtime_seconds: 60, inputs: [{ key: 'in.bin' }] },
      renter,
    );
    const daemon = { authorization: `Bearer ${await m.deps.token.get()}` };
    const grant = () =>
      rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/sessions/${r.id}/workload/grants`,
        headers: daemon,
        payload: { outputs: ['late.bin'] },
      });
    const before = await grant();
    const signedBy = Date.now();
    expect(before.json().inputs).toHaveLength(1);
    // Signed while the session runs (its end not known yet): valid no longer than the upload window, so that no URL
    // signed before the end outlives the window after it (a presigned URL cannot be taken back). Signed before the
    // answer came: valid until no later than the window after that.
    expect(Date.parse(before.json().expires_at)).toBeLessThanOrEqual(signedBy + WINDOW_MS);
    const runner = m.runner();
    runner.run();
    try {
      await until(
        () => rig.workloadOf(r.headers, r.id),
        (w) => w.state === 'running',
      );
      const running = await grant();
      expect(running.statusCode).toBe(200);
      expect(running.json().inputs).toEqual([]);
      const ended = await until(
        () => rig.workloadOf(r.headers, r.id),
        (w) => w.state === 'exited',
      );
      // Within the window: logs and outputs may still be written, each URL never valid past the window.
      // (Billing counts the seconds left, storage signs for that many from its own now: later by the call between
      // them, which the grant's own time bounds.)
      const asked = Date.now();
      const late = await grant();
      const took = Date.now() - asked;
      expect(late.statusCode).toBe(200);
      expect(Date.parse(late.json().expires_at)).toBeLessThanOrEqual(Date.parse(ended.ended_at) + WINDOW_MS + took);
      await new Promise((done) => setTimeout(done, Date.parse(ended.ended_at) + WINDOW_MS + 200 - Date.now()));
      const closed = await grant();
      expect(closed.statusCode).toBe(409);
      expect(closed.json().code).toBe('UPLOAD_WINDOW_CLOSED');
    } finally {
      await runner.stop();
    }
  });
});

describe('an output file, opened for its upload', () => {
  it('is opened through real directories only: a link anywhere on its path is refused, never followed', async () => {
    const root = mkdtempSync(join(tmpdir(), 'open-beneath-'));
    try {
      const outside = mkdtempSync(join(tmpdir(), 'open-beneath-host-'));
      writeFileSync(join(outside, 'secret'), 'the host');
      mkdirSync(join(root, 'real'));
      writeFileSync(join(root, 'real', 'result.txt'), 'mine');
      // What a workload still running could swap in after the walk: a directory, or the file, made a link.
      symlinkSync(outside, join(root, 'swapped'));
      symlinkSync(join(outside, 'secret'), join(root, 'real', 'linked.txt'));
      const held = await openBeneath(root, 'real/result.txt');
      expect(await held.readFile('utf8')).toBe('mine');
      await held.close();
      for (const rel of ['swapped/secret', 'real/linked.txt', 'real']) {
        await expect(openBeneath(root, rel), rel).rejects.toThrow();
      }
      rmSync(outside, { recursive: true, force: true });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
