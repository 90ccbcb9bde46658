/**
 * The HTTP load generator of the usage benchmark (bench/usage.ts), run as a
 * process of its own so that its CPU is not the service's: `workers`
 * keep-alive connections each POST usage updates for `seconds`, round robin
 * over the sessions; one update in 20 is sent a second time (a daemon's
 * retry), which must answer 200 `duplicate`. Reads its job as JSON on stdin and
 * prints its counts as JSON on stdout.
 */
import { Agent, request } from 'node:http';

interface Job {
  port: number;
  sessions: string[];
  seconds: number;
  workers: number;
}

const job = JSON.parse(await new Response(process.stdin as unknown as ReadableStream).text()) as Job;
const agent = new Agent({ keepAlive: true, maxSockets: job.workers });

function post(body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: '127.0.0.1',
        port: job.port,
        method: 'POST',
        path: '/api/v1/billing/usage-update',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

let seq = 0;
const counts = { unique: 0, sent: 0, errors: 0, seconds: 0 };
const started = Date.now();
const deadline = started + job.seconds * 1000;
await Promise.all(
  Array.from({ length: job.workers }, async () => {
    while (Date.now() < deadline) {
      const n = seq++;
      const body = JSON.stringify({
        session_id: job.sessions[n % job.sessions.length],
        timestamp: new Date().toISOString(),
        gpu_utilization: 90,
        power_draw_w: 400 + (n % 50),
        message_id: `http-${n}`,
      });
      const status = await post(body).catch(() => 0);
      counts.sent++;
      if (status === 201) counts.unique++;
      else counts.errors++;
      if (n % 20 === 0) {
        const again = await post(body).catch(() => 0); // a retried report
        counts.sent++;
        if (again !== 200) counts.errors++;
      }
    }
  }),
);
counts.seconds = (Date.now() - started) / 1000;
agent.destroy();
process.stdout.write(JSON.stringify(counts));
