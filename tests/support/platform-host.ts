/**
 * A process that starts `pnpm start` as a test does (`startPlatform`, at place 2: tests/start-checks.test.ts's) and
 * waits, for that test to kill with SIGKILL as a test runner can be killed. Once the platform is up (or the wait is
 * over) it prints one line of JSON, `{"start": <pnpm start's pid>, "output": <what pnpm start printed>}`, then idles.
 *   node --import tsx tests/support/platform-host.ts <data folder>
 */
import { platformPlace, startPlatform } from './platform-start.ts';

const platform = startPlatform(platformPlace(2), {}, process.argv[2]);
await platform.untilPrinted('[start] up', 200_000);
process.stdout.write(`${JSON.stringify({ start: platform.child.pid, output: platform.output() })}\n`);
setInterval(() => {}, 60_000);
