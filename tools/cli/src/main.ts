/**
 * `gpu`: the platform's command line for renters and providers (`pnpm gpu ...`, or the package's `gpu` bin), every call
 * through the typed client (`@gpu/client`) to the platform's one origin, the gateway: `--url`, else `GPU_URL`, else
 * the URL saved by `gpu login`, else `pnpm start`'s where PLATFORM_PORT_BASE/PLATFORM_HOST or its data folder place
 * it, else `http://127.0.0.1:8080` (platform-url.ts).
 *
 * Conventions: `--help` on every command; exit status 0, 1 (the platform refused or failed: one line on standard error
 * with the problem's code and detail, and what to run next where there is something), 2 (a usage error); `gpu run`
 * exits with its workload's exit code. `--json` prints the platform's answer as JSON for scripts, and a failure as
 * one JSON object on standard error (`{status, code, detail}`: problems.ts); no colour (`NO_COLOR` holds trivially);
 * no secret is ever printed but the key `gpu keys create` makes, once.
 */
import { main } from './program.ts';

process.exitCode = await main(process.argv);
