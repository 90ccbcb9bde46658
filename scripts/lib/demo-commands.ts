/**
 * What `pnpm demo` tells the person watching it: how long it takes (said once, at its start and in its help), and
 * what each step stands for at the command line: the `gpu` command (`pnpm gpu` in the checkout) a
 * person would type to do what the step did, or to see what it shows; where `gpu` has none yet, the other command
 * of the checkout (`pnpm wallet fund`, `pnpm mail`, the daemon's) or the HTTP call (`curl`). The demo itself calls the
 * platform with the typed client, as a program would; it prints each step's line here under the step's own
 * (`$ pnpm gpu offers --gpu-model H100 ...`), so the demo reads as a tutorial of the command line.
 *
 * Each entry takes the step's values by name and gives its command lines; `tests/demo-commands.test.ts` checks every
 * `gpu` command and option named here against the command line's own definition, and every `pnpm` script against
 * package.json, so that none names a command that is not there.
 */

/**
 * How long the demo takes on a 2-core machine, in minutes, about: most of it waiting on the platform's own clocks
 * (billing minutes, spend caps, a minute and a half for the registry to take a silent machine for offline).
 * docs/demo.md says the same (tests/demo-commands.test.ts checks it).
 */
export const DEMO_MINUTES = 5;

/** The values a step's command names: IDs, addresses, amounts. */
type Values = Record<string, string>;

/** `pnpm gpu` in the checkout: the command line as a newcomer runs it. */
const gpu = (args: string) => `pnpm gpu ${args}`;

/** The terms of the demo's job (`gpu jobs submit`): what it needs, not where. */
export const JOB_TERMS = [
  '--gpus',
  '1',
  '--gpu-model',
  'H100',
  '--max-price',
  '300',
  '--spend-cap',
  '60',
  '--checkpoint-every',
  '5',
  '--max-runtime',
  '15m',
];

/** The daemon as a provider runs it (tools/provider-daemon/README.md). */
const daemon = (config: string) => `DAEMON_CONFIG_FILE=${config} pnpm --filter @gpu/provider-daemon start`;

export const DEMO_COMMANDS = {
  startPlatform: () => ['pnpm start'],
  signUp: (v: Values) => [gpu(`signup --email ${v.email} --role ${v.role}`)],
  verifyAddress: (v: Values) => [`pnpm mail --to ${v.email}`, `GPU_EMAIL_CODE=<code> ${gpu('email verify')}`],
  daemonClient: (v: Values) => [gpu(`provider daemon-credentials ${v.name} --out daemon-credentials.json`)],
  runDaemon: (v: Values) => [daemon(v.config ?? 'daemon.yaml'), gpu('provider machines')],
  setRates: (v: Values) => [
    gpu(`provider rates set ${v.machine} --base H100=200`),
    gpu(`provider payout-settings ${v.machine} --auto on --to ${v.address}`),
  ],
  fund: (v: Values) => [`pnpm wallet fund --address ${v.address} --amount ${v.amount}`],
  deposit: (v: Values) => [
    gpu('wallet open --keypair <keypair.json>'),
    gpu(`wallet deposit --keypair <keypair.json> --amount ${v.amount}`),
    gpu(`wallet balance ${v.wallet}`),
  ],
  findOffer: (v: Values) => [
    gpu(`offers --gpu-model H100 --min-free-gpus ${v.gpus} --min-reliability 0.9 --sort price`),
  ],
  upload: (v: Values) => [gpu(`storage cp ${v.file} gpu:${v.key}`)],
  quote: (v: Values) => [gpu(`quote --machine ${v.machine} --gpu-model H100 --gpus ${v.gpus}`)],
  rent: (v: Values) => [
    gpu(`rent --machine ${v.machine} --gpu-model H100 --gpus ${v.gpus} --wallet ${v.wallet} --max-rate ${v.rate}`),
  ],
  rentCapped: (v: Values) => [
    gpu(`rent --machine ${v.machine} --gpu-model H100 --gpus ${v.gpus} --wallet ${v.wallet} --spend-cap ${v.cap}`),
  ],
  machines: () => [gpu('machines')],
  setBidFloor: (v: Values) => [gpu(`provider rates set ${v.machine} --bid-floor 50`)],
  runAtBid: (v: Values) => [
    gpu(
      `run --machine ${v.machine} --gpu-model H100 --gpus 8 --wallet ${v.wallet} --bid 60 --spend-cap 20 ` +
        "--max-runtime 10m -- sh -c '<save when told to stop>'",
    ),
  ],
  raiseBid: (v: Values) => [gpu(`bid ${v.session} --price 70`)],
  presignedTransfer: (v: Values) => [
    gpu(`storage presign gpu:${v.key} --put`),
    `curl -s -T ${v.file} '<the URL it printed>'`,
    gpu(`storage cp gpu:${v.key} -`),
  ],
  sessions: () => [gpu('sessions --status active')],
  killDaemon: () => ['kill -9 <the daemon>'],
  restartDaemon: (v: Values) => [daemon(v.config ?? 'daemon.yaml')],
  sessionEnded: () => [gpu('sessions --status completed')],
  end: (v: Values) => [gpu(`end ${v.session}`)],
  runJob: (v: Values) => [
    gpu(
      `rent --machine ${v.machine} --gpu-model H100 --gpus 2 --wallet ${v.wallet} --input ${v.input} ` +
        `--max-runtime 600 -- sh -c '<the job>'`,
    ),
  ],
  runCappedJob: (v: Values) => [
    gpu(
      `rent --machine ${v.machine} --gpu-model H100 --gpus 2 --wallet ${v.wallet} --spend-cap ${v.cap} ` +
        '--max-runtime 1h -- sleep 3600',
    ),
  ],
  followLog: (v: Values) => [gpu(`logs ${v.session} -f`)],
  download: (v: Values) => [gpu(`storage cp gpu:${v.key} -`)],
  login: (v: Values) => [gpu(`login --email ${v.email}`)],
  rentIdle: (v: Values) => [
    gpu(`rent --idle --machine ${v.machine} --gpu-model H100 --gpus ${v.gpus} --wallet ${v.wallet} --max-runtime 15m`),
  ],
  exec: (v: Values) => [gpu(`exec ${v.session} -- ${v.command}`)],
  readPort: (v: Values) => [
    `curl -s -H "authorization: Bearer <token>" ${v.gateway}/api/v1/billing/sessions/${v.session}/ports/8000/`,
    gpu(`port-forward ${v.session} 8000`),
  ],
  openPort: (v: Values) => [gpu(`open ${v.session} 8000`)],
  earnings: (v: Values) => [gpu(`earnings ${v.machine}`)],
  submitJob: (v: Values) => [
    gpu(`jobs submit --wallet ${v.wallet} ${JOB_TERMS.join(' ')} -- sh -c '<count into a checkpoint>'`),
  ],
  followJob: (v: Values) => [gpu(`jobs logs ${v.job} -f`)],
  showJob: (v: Values) => [gpu(`jobs show ${v.job}`)],
  walletHistory: (v: Values) => [gpu(`wallet history ${v.wallet}`)],
  installSandbox: () => ['apt-get install bubblewrap'],
} satisfies Record<string, (v: Values) => string[]>;

export type DemoCommand = keyof typeof DEMO_COMMANDS;

/** The command lines step `name` stands for, with `values` put in. */
export function standsFor(name: DemoCommand, values: Values = {}): string[] {
  return DEMO_COMMANDS[name](values);
}
