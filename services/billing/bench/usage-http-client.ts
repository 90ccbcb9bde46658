/**
 * The HTTP load generator of the usage benchmark (bench/usage.ts), run as a
 * process of its own so that its CPU is not the service's: `workers`
 * keep-alive connections each POST usage reports for `seconds`, round robin
 * over the sessions. With `batch` 1 each request is one report
 * (POST /usage-update); with more, a request carries `batch` reports for as
 * many sessions (POST /usage-updates, a daemon with several rented GPUs). One
 * request in 20 is sent a second time (a daemon's retry), which must answer
 * every report as a duplicate. The same load runs `warmupSeconds` first,
 * uncounted, with message IDs of its own (`<prefix>w-<n>`), so the counted run
 * measures compiled code rather than the first seconds of JIT warm-up. Reads
 * its job as JSON on stdin and prints its counts and the CPU it used in the
 * counted run as JSON on stdout (after a `warm` line when the warm-up ends).
 */
import { Agent, request } from 'node:http';

interface Job {
  port: number;
  sessions: string[];
  seconds: number;
  warmupSeconds: number;
  workers: number;
  batch: number;
  prefix: string;
  /** The `authorization` header every request carries (access control is on). */
  authorization: string;
}

const job = JSON.parse(await new Response(process.stdin as unknown as ReadableStream).text()) as Job;
const agent = new Agent({ keepAlive: true, maxSockets: job.workers });
const path = job.batch > 1 ? '/api/v1/billing/usage-updates' : '/api/v1/billing/usage-update';

/** POSTs a body; resolves with the status and, for the batch route, each report's status. */
function post(body: string): Promise<{ status: number; statuses: number[] }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: '127.0.0.1',
        port: job.port,
        method: 'POST',
        path,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          authorization: job.authorization,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          if (job.batch === 1 || status !== 200) return resolve({ status, statuses: [status] });
          const { results } = JSON.parse(Buffer.concat(chunks).toString()) as { results: { status: number }[] };
          resolve({ status, statuses: results.map((r) => r.status) });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

let seq = 0;
const report = (prefix: string) => {
  const n = seq++;
  return {
    session_id: job.sessions[n % job.sessions.length],
    timestamp: new Date().toISOString(),
    gpu_utilization: 90,
    power_draw_w: 400 + (n % 50),
    message_id: `${prefix}-${n}`,
  };
};

const failed = { status: 0, statuses: [0] };

/** Runs the load for `seconds` with message IDs `<prefix>-<n>`; returns what it counted. */
async function run(seconds: number, prefix: string) {
  const counts = { unique: 0, sent: 0, requests: 0, errors: 0, seconds: 0 };
  const started = Date.now();
  const deadline = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: job.workers }, async (_, worker) => {
      for (let i = 0; Date.now() < deadline; i++) {
        const reports = Array.from({ length: job.batch }, () => report(prefix));
        const body = JSON.stringify(job.batch > 1 ? { reports } : reports[0]);
        const first = await post(body).catch(() => failed);
        counts.requests++;
        counts.sent += job.batch;
        for (const s of first.statuses) {
          if (s === 201) counts.unique++;
          else counts.errors++;
        }
        if ((i + worker) % 20 === 0) {
          const again = await post(body).catch(() => failed); // a retried request
          counts.requests++;
          counts.sent += job.batch;
          counts.errors += again.statuses.filter((s) => s !== 200).length;
        }
      }
    }),
  );
  counts.seconds = (Date.now() - started) / 1000;
  return counts;
}

if (job.warmupSeconds > 0) await run(job.warmupSeconds, `${job.prefix}w`);
process.stdout.write('warm\n'); // the service's CPU is counted from here
const cpuBefore = process.cpuUsage();
const counts = await run(job.seconds, job.prefix);
const cpu = process.cpuUsage(cpuBefore);
agent.destroy();
process.stdout.write(JSON.stringify({ ...counts, cpuMs: (cpu.user + cpu.system) / 1000 }));
