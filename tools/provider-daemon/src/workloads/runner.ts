/**
 * Runs the renters' workloads of the machine's sessions, each in its sandbox (sandbox.ts; a spec with `image`: in a
 * container, container.ts) on exactly the GPUs its session leased, and tells billing how far each got; billing
 * charges only while one runs.
 *
 * Every `workloads.poll_interval` (1 s) the runner asks billing which sessions run on the machine (the same list the
 * usage reports use):
 *
 * - a session with a workload the runner has not seen: it reads the workload (`GET /billing/sessions/{id}/workload`:
 *   the spec, checked again here), reports `preparing`, makes the session's work directory (owned by the workload's
 *   user) and log directory, starts the sandbox and reports `running` at the moment it started; when the sandbox ends
 *   it reports `exited` (the exit code), `stopped` (`max_runtime`, `memory_limit`, `disk_limit`) or `failed` (it could
 *   not start), and billing ends the session then;
 * - a session no longer in the list (billing ended it: its renter, its cap, its funds, its machine): its workload is
 *   stopped (SIGTERM, `workloads.stop_grace`, SIGKILL) and reported `stopped` (`session_ended`) once no process of it
 *   is left. The bound: one poll interval plus the grace period.
 *
 * **A daemon that dies takes its workloads with it** (`--die-with-parent`): none runs unwatched. Started again, it
 * finds the workloads billing still shows `preparing` or `running` that it did not start, and reports them `stopped`
 * with reason `daemon_restarted` at the last time it knew them alive (its journal in `run_dir`, written every poll),
 * so nothing after that is billed; the session ends with it (`workload_lost`, a fault of the machine's).
 *
 * **A partition cannot leave work running for free.** The workload's `paid_until` (its session's hold at the frozen
 * rate; asked again every 30 s, as billing tops the hold up) bounds it while billing cannot be reached: after three
 * polls without an answer, a workload past that time is stopped (`paid_time_over`), reported once billing answers.
 *
 * A report that fails is tried again at the next poll (reports are idempotent at billing).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import path from 'node:path';
import { billingClient, type TokenSource, unwrap } from '@gpu/client';
import {
  CHECKPOINT_DIR,
  durationMs,
  type Logger,
  maxOutputPathBytes,
  NOTICE_FILE,
  type WorkloadSpec,
  workloadSpecSchema,
} from '@gpu/common';
import { type DaemonConfig, MIN_DISK_MB } from '../config.ts';
import type { GpuReading } from '../gpu/nvidia-smi.ts';
import type { GpuSource } from '../gpu/source.ts';
import type { SessionTraces, TraceContext } from '../session-trace.ts';
import { writeDurably } from '../state.ts';
import type { RunningSession } from '../usage.ts';
import { type CgroupPlace, cgroupPlace, type WorkloadCgroup, workloadCgroup } from './cgroups.ts';
import { CHECKPOINT_NAME, maxCheckpointBytes, packRunning, unpack } from './checkpoint.ts';
import { commandProblem } from './command.ts';
import {
  type ContainerRuntime,
  configuredRuntime,
  imageRefused,
  PullError,
  pullImage,
  removeOrphans,
  startContainer,
} from './container.ts';
import { controlDevices, nvidiaDevices, simulatedDevices } from './devices.ts';
import { diskShareMb, filesystemProblem, prepareDisk, type SessionDisk } from './disk.ts';
import type { Entry } from './entry.ts';
import type { SessionFiles } from './files.ts';
import { FileKeeper } from './keeper.ts';
import type { ProcessRef } from './processes.ts';
import {
  initOf,
  killLeftSandboxes,
  SANDBOX_PATH,
  type Sandbox,
  type SandboxEnd,
  type SandboxGpu,
  sandboxView,
  startSandbox,
} from './sandbox.ts';

type Report =
  | { state: 'preparing' | 'running'; at: string }
  | { state: 'exited'; at: string; exit_code: number }
  | { state: 'failed' | 'stopped'; at: string; reason: string };

export interface WorkloadRunnerDeps {
  config: DaemonConfig;
  logger: Logger;
  token: TokenSource;
  gpus: GpuSource;
  /** The machine's provider ID once the daemon attached. */
  providerId: () => string | undefined;
  /** The sessions running on the machine (billing's list). */
  sessions: (providerId: string) => Promise<RunningSession[]>;
  /** Each session's trace, which its reports continue (`session-trace.ts`; filled by the list above). */
  traces?: SessionTraces;
  /** The clock of paid time (tests move it by hand); `Date.now` by default. */
  now?: () => number;
  /**
   * Subscribes to a NATS subject (the machine's: `<workloads.dispatch_subject>.<owner ID>.<provider ID>`), calling
   * back on each message; absent without NATS (polling alone).
   */
  nudges?: (subject: string, onMessage: () => void) => { unsubscribe(): void };
  /**
   * The machine's owner, as the daemon's own NATS user names it (nats-user.ts: that user may hear its owner's machines'
   * nudges alone); absent, the subject takes any owner (`*`): the machine's ID is the one that matters.
   */
  nudgeOwner?: string;
}

interface Running {
  sandbox: Sandbox;
  slot: number;
  /** Its work directory and /tmp. */
  disk: SessionDisk;
  /** Its files in the renter's storage (null: it keeps none there; its logs stay on the machine). */
  files: SessionFiles | null;
  /** The machine's GPUs it runs on (their indices). */
  gpus: number[];
  /** When its logs were last uploaded. */
  shippedAt: number;
  /** Until when its session's funds pay for running, as billing last said (null: not said). */
  paidUntil: number | null;
  /** When billing last said it. */
  paidAsked: number;
  /**
   * A job's checkpoint: taken every `everyMs` while it runs, from inside it (checkpoint.ts); `busy` while one is under
   * way.
   */
  checkpoint: { everyMs: number; at: number; busy: boolean } | null;
}

/** How often the runner asks billing again how long each running workload is paid for. */
const PAID_REFRESH_MS = 30_000;
/** How long the runner waits for billing to say whether an ended session was preempted (its notice). */
const NOTICE_ASK_MS = 2_000;
/**
 * The grace an ended session's workload gets when billing cannot say whether it was preempted: the default of
 * `billing.preemption_grace`, so that a preempted workload is never cut shorter than that by this machine's
 * `stop_grace`.
 */
const UNSAID_NOTICE_MS = 30_000;

/**
 * Writes the notice into the workload's work directory (`NOTICE_FILE`, /work inside), which its user owns: under a
 * new name of the daemon's (O_EXCL, O_NOFOLLOW: nothing the workload made there is followed or written through), then
 * renamed over the notice's name (a rename replaces a link, never follows it).
 */
function writeNotice(workDir: string, notice: { reason: string; at: string; deadline: string }): void {
  const tmp = path.join(workDir, `.gpu-notice-${randomBytes(8).toString('hex')}`);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
  try {
    writeSync(fd, `${JSON.stringify(notice)}\n`);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path.join(workDir, path.basename(NOTICE_FILE.inside)));
}

const JOURNAL = 'journal.json';

/** What an idle workload runs: a process that waits until it is stopped (coreutils' `sleep`, in its PATH). */
export const IDLE_COMMAND = ['sleep', 'infinity'] as const;

/**
 * Why this machine cannot run a sandbox, or null when it can: bubblewrap missing, or (a daemon running as root, whose
 * workloads run as users of their own) a run directory those users could not reach (a parent without the others'
 * execute bit, as a home directory of mode 0700).
 */
export function sandboxProblem(bwrap: string, dir: string): string | null {
  if (spawnSync(bwrap, ['--version']).status !== 0) return `${bwrap} cannot be run: apt-get install bubblewrap`;
  if (process.getuid?.() !== 0) return null;
  for (let d = path.dirname(dir); ; d = path.dirname(d)) {
    const mode = statSync(d).mode;
    if ((mode & 0o001) === 0) {
      return (
        `workloads.run_dir ${dir}: ${d} does not let other users through (mode ${(mode & 0o777).toString(8)}); ` +
        'choose a run directory under one that does (/var/lib/gpu-daemon), or chmod o+x it'
      );
    }
    if (d === path.dirname(d)) return null;
  }
}

/**
 * A workload's limits in bytes and counts, from the daemon's settings (the same in either mode); `diskMb`: its disk
 * allowance where the machine gives less than `disk_mb` (WorkloadRunner.diskMb).
 */
export function workloadLimits(settings: DaemonConfig['workloads'], diskMb = settings.disk_mb) {
  return {
    processes: settings.processes,
    openFiles: settings.open_files,
    memoryBytes: settings.memory_mb * 1024 * 1024,
    diskBytes: diskMb * 1024 * 1024,
    diskFiles: settings.disk_files,
    logBytes: settings.log_kb * 1024,
  };
}

/**
 * How workloads' disks are kept on this machine (disk.ts): a filesystem of its own each, bounded by the kernel, or,
 * where none can be mounted (or `workloads.disk_filesystem` is off), the watch; said once at the start.
 */
async function diskKind(settings: DaemonConfig['workloads'], logger: Logger): Promise<'filesystem' | 'watch'> {
  const problem = settings.disk_filesystem
    ? await filesystemProblem(path.resolve(settings.run_dir))
    : 'workloads.disk_filesystem is off';
  if (!problem) {
    logger.info('each workload gets a filesystem of its own: the kernel holds it to its disk allowance');
    return 'filesystem';
  }
  logger.warn(
    `workloads get no filesystem of their own (${problem}): their disk allowance is watched (a count each second), not held by the kernel`,
  );
  return 'watch';
}

/** The configured container runtime, when there is one that runs (its version said once). */
function containerRuntime(settings: DaemonConfig['workloads'], logger: Logger): ContainerRuntime | null {
  const configured = configuredRuntime(settings);
  if (!configured) return null;
  if ('problem' in configured) {
    logger.error(`${configured.problem}: container workloads are reported failed`);
    return null;
  }
  logger.info({ runtime: configured.version }, 'container workloads run here');
  return configured.runtime;
}

export class WorkloadRunner {
  private readonly billing;
  private readonly settings;
  private readonly running = new Map<string, Running>();
  /** Sessions whose `preparing` billing took from this process (a retry after a failure goes on with them). */
  private readonly prepared = new Set<string>();
  /** Sessions whose workload this process has finished with (ended, reported, or lost). */
  private readonly done = new Set<string>();
  /** Reports billing has not taken yet, by session, in order: sent one after another, again at each poll. */
  private readonly unsent = new Map<string, Report[]>();
  /** Sessions whose launch (inputs, image, sandbox) is under way, with their leased GPUs (null: not named). */
  private readonly launching = new Map<string, number[] | null>();
  /**
   * Launches whose session billing ended meanwhile (gone from its list: preempted, ended by its renter): they start
   * nothing, so a session leased their GPUs never waits for them nor runs beside them.
   */
  private readonly abandoned = new Set<string>();
  /** Sessions billing ended whose workload is being stopped (their notice asked for once). */
  private readonly ending = new Set<string>();
  /** Slots (and so users) taken by launches that are not running yet (a checkpoint restored as its user). */
  private readonly reservedSlots = new Set<number>();
  /** Each session's directory and files until they are kept (on disk: a restarted daemon goes on with them). */
  private readonly keeper: FileKeeper;
  /** Whether the directories an earlier life left were taken up. */
  private resumed = false;
  /** Each workload's disk allowance here, MB (decided once: diskMb). */
  private diskAllowanceMb: number | undefined;
  /** How workloads' disks are kept here (asked once). */
  private diskKind: Promise<'filesystem' | 'watch'> | undefined;
  /** The sending of each session's reports, so that they reach billing in the order they happened. */
  private readonly sending = new Map<string, Promise<void>>();
  private readonly lastAlive: Date;
  private devices: Map<number, string> | undefined;
  private readonly now: () => number;
  /** When billing last answered the poll. */
  private lastContact: number;
  private stopped = false;
  /** A poll is under way; `again`: another was asked for meanwhile. */
  private ticking = false;
  private again = false;
  private subscription: { unsubscribe(): void } | undefined;
  private timer: NodeJS.Timeout | undefined;

  /** The daemon's own files, masked in every sandbox wherever they are bound. */
  private readonly hidden: string[];
  /** Why no sandbox can run on this machine (null: they can). */
  private readonly problem: string | null;
  /** The container runtime (null: none configured, or it cannot be run). */
  private readonly containers: ContainerRuntime | null;
  /** Where sandboxes' control groups are made (null: none can be; the watch alone limits them). */
  private readonly cgroups: CgroupPlace | null;
  /** The containers an earlier life left are removed before anything starts. */
  private orphansRemoved = false;

  constructor(private readonly deps: WorkloadRunnerDeps) {
    this.settings = deps.config.workloads;
    this.now = deps.now ?? Date.now;
    this.lastContact = this.now();
    this.hidden = [
      deps.config.state_file,
      deps.config.credentials.file,
      deps.config.nats_credentials,
      process.env.DAEMON_CONFIG_FILE ?? '',
    ]
      .filter(Boolean)
      .map((p) => path.resolve(p));
    this.billing = billingClient({
      baseUrl: deps.config.billing_url,
      token: deps.token,
      timeoutMs: durationMs(deps.config.request_timeout),
    });
    mkdirSync(this.settings.run_dir, { recursive: true });
    // Workloads' users pass through to their own work directory, and list nothing.
    chmodSync(this.settings.run_dir, 0o711);
    this.keeper = new FileKeeper(this.billing, this.settings.run_dir, deps.logger);
    this.problem = sandboxProblem(this.settings.bwrap_path, path.resolve(this.settings.run_dir));
    if (this.problem) deps.logger.error(`workloads cannot run here: ${this.problem}; each one is reported failed`);
    this.containers = containerRuntime(this.settings, deps.logger);
    this.cgroups = null;
    if (this.settings.cgroups) {
      const { place, problem } = cgroupPlace(this.settings.cgroup_parent);
      this.cgroups = place;
      if (problem)
        deps.logger.warn(
          `sandboxes get no control group (${problem}): their memory is limited by the daemon's watch alone`,
        );
    }
    this.lastAlive = this.readJournal();
  }

  /** Polls until `stop()`; with `nudges`, also at once whenever billing nudges the machine's subject. */
  run(): void {
    this.poll();
  }

  /** Polls now (and listens for nudges, the machine's ID known): the daemon attached to its machine. */
  poll(): void {
    void this.tick();
  }

  /**
   * One poll, then the next after `poll_interval` (at once when a nudge came meanwhile): one poll at a time, however
   * many nudges arrive.
   */
  private async tick(): Promise<void> {
    if (this.stopped) return;
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = true;
    clearTimeout(this.timer);
    try {
      await this.sync().catch((err) => this.deps.logger.warn({ err }, 'workload poll failed; trying again'));
      // Stopped meanwhile: nothing more (its run directory may be gone already).
      if (this.stopped) return;
      // Alive, billing or not: a later life bills what it lost up to here (a partition's time included).
      if (this.deps.providerId()) this.writeJournal();
      this.stopUnpaid();
      this.shipLogs();
      this.takeCheckpoints();
      this.listen();
    } finally {
      this.ticking = false;
    }
    if (this.stopped) return;
    const wait = this.again ? 0 : durationMs(this.settings.poll_interval);
    this.again = false;
    this.timer = setTimeout(() => void this.tick(), wait);
  }

  /** Subscribes to the machine's subject once its provider ID is known: each nudge polls at once. */
  private listen(): void {
    const providerId = this.deps.providerId();
    if (this.subscription || !this.deps.nudges || !providerId) return;
    const subject = `${this.settings.dispatch_subject}.${this.deps.nudgeOwner ?? '*'}.${providerId}`;
    this.subscription = this.deps.nudges(subject, () => void this.tick());
    this.deps.logger.info({ subject }, 'listening for new and ended sessions on NATS (polling on as the fallback)');
  }

  /** Stops polling and every workload it runs (reported `stopped`, `daemon_stopped`); resolves once they are gone. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.subscription?.unsubscribe();
    await Promise.all([...this.running.values()].map((r) => r.sandbox.stop('daemon_stopped')));
    await this.flushReports();
  }

  /** One poll: new workloads started, those of ended sessions stopped, unsent reports sent. */
  async sync(): Promise<void> {
    const providerId = this.deps.providerId();
    if (!providerId) return;
    if (!this.orphansRemoved && this.containers) {
      try {
        const sessions = await removeOrphans(this.containers, path.resolve(this.settings.run_dir));
        this.orphansRemoved = true;
        if (sessions.length > 0)
          this.deps.logger.warn({ sessions }, 'removed the workload containers an earlier life of the daemon left');
      } catch (err) {
        // Tried again at the next poll; no container starts meanwhile (launch waits for it), the rest goes on.
        this.deps.logger.error({ err }, 'the containers an earlier life left could not be listed or removed');
      }
    }
    if (!this.resumed) {
      await this.keeper.resume();
      this.resumed = true;
    }
    const sessions = await this.deps.sessions(providerId);
    this.lastContact = this.now();
    this.writeJournal();
    const live = new Set(sessions.map((s) => s.id));
    for (const [id, r] of this.running) if (!live.has(id)) void this.stopEnded(id, r);
    // Before any new launch: a launch whose session ended will start nothing (the GPUs may be leased anew below).
    for (const id of this.launching.keys()) if (!live.has(id)) this.abandoned.add(id);
    // Each launch on its own: one whose inputs take minutes to arrive holds up no other session, nor the stops.
    for (const s of sessions) {
      if (!s.workload || this.running.has(s.id) || this.done.has(s.id) || this.launching.has(s.id)) continue;
      this.launching.set(s.id, s.gpuIndices ?? null);
      void this.launch(s)
        .catch((err) => this.deps.logger.warn({ err, session_id: s.id }, 'starting a workload failed; trying again'))
        .finally(() => {
          this.launching.delete(s.id);
          this.abandoned.delete(s.id);
        });
    }
    await this.keeper.tick();
    // Alive, with what it started: a later life bills what it lost up to here.
    this.writeJournal();
    await this.refreshPaid();
    await this.flushReports();
  }

  /**
   * While billing cannot be reached (no answer for three polls), a workload runs no longer than its session's funds
   * pay for (`paid_until`): it is stopped then (`paid_time_over`), and reported when billing answers again. While
   * billing answers, billing decides (a session in its grace period runs on until billing ends it).
   */
  stopUnpaid(): void {
    const now = this.now();
    if (now - this.lastContact < 3 * durationMs(this.settings.poll_interval)) return;
    for (const r of this.running.values()) {
      if (r.paidUntil !== null && now >= r.paidUntil) void r.sandbox.stop('paid_time_over');
    }
  }

  /**
   * Stops the workload of a session billing ended. A preempted one gets its notice first: the file inside it (its
   * deadline), then SIGTERM, and SIGKILL once the grace billing set (`billing.preemption_grace`) has passed since,
   * whatever this machine's `stop_grace`. Asked of billing once per session (2 s at most); when billing cannot say
   * (no answer, or an error), the workload may have been preempted: it gets SIGTERM and at least the default notice's
   * length (`UNSAID_NOTICE_MS`) before SIGKILL, never less than the platform promises, but no file.
   */
  private async stopEnded(id: string, r: Running): Promise<void> {
    if (this.ending.has(id)) return;
    this.ending.add(id);
    let graceMs: number | undefined = Math.max(durationMs(this.settings.stop_grace), UNSAID_NOTICE_MS);
    try {
      const result = await this.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
        params: { path: { sessionID: id } },
        signal: AbortSignal.timeout(NOTICE_ASK_MS),
      });
      // Billing said: a notice, or none (the plain stop, at this machine's `stop_grace`).
      if (result.response.ok) graceMs = undefined;
      const notice = result.data?.notice;
      if (notice) {
        // The grace's length, from now: a clock of the machine's that differs from billing's neither cuts it short
        // nor holds the winner's GPUs past it.
        graceMs = Math.max(0, Date.parse(notice.deadline) - Date.parse(notice.at));
        writeNotice(r.disk.workDir, notice);
        this.deps.logger.info({ session_id: id, deadline: notice.deadline }, 'preempted: the workload has its notice');
      }
    } catch (err) {
      this.deps.logger.warn({ err, session_id: id }, 'the notice of an ended session could not be given');
    }
    await r.sandbox.stop('session_ended', graceMs);
  }

  /** Asks billing again, every 30 s, how long each running workload is paid for. */
  private async refreshPaid(): Promise<void> {
    const now = Date.now();
    for (const [id, r] of this.running) {
      if (now - r.paidAsked < PAID_REFRESH_MS) continue;
      const result = await this.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
        params: { path: { sessionID: id } },
      });
      if (!result.response.ok || !result.data) continue;
      r.paidAsked = now;
      r.paidUntil = result.data.paid_until ? Date.parse(result.data.paid_until) : r.paidUntil;
    }
  }

  private async launch(session: RunningSession): Promise<void> {
    const w = unwrap(
      await this.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
        params: { path: { sessionID: session.id } },
      }),
    );
    if (w.state === 'exited' || w.state === 'failed' || w.state === 'stopped') {
      this.done.add(session.id);
      return;
    }
    if (w.state === 'running' || (w.state === 'preparing' && !this.prepared.has(session.id))) {
      // Started by an earlier life of this daemon, which took it along when it died.
      this.done.add(session.id);
      await this.send(session.id, { state: 'stopped', at: this.lastAlive.toISOString(), reason: 'daemon_restarted' });
      return;
    }
    const parsed = workloadSpecSchema.safeParse(w.spec);
    const unable = !parsed.success
      ? 'invalid_spec'
      : parsed.data.image
        ? !this.containers
          ? 'container_runtime_unavailable'
          : imageRefused(parsed.data.image, this.settings.allowed_registries)
            ? 'image_refused'
            : null
        : this.problem
          ? 'sandbox_unavailable'
          : null;
    if (unable || !parsed.success) {
      this.done.add(session.id);
      await this.send(session.id, { state: 'failed', at: new Date().toISOString(), reason: unable ?? 'invalid_spec' });
      return;
    }
    // An idle workload (to reach with `gpu shell`) runs a process that waits, in the sandbox or the image's container.
    const { idle, ...given } = parsed.data;
    const spec = idle ? { ...given, command: [...IDLE_COMMAND] } : given;
    // Nothing starts before billing took `preparing`: a session that ended meanwhile (409) runs nothing.
    if (!this.prepared.has(session.id)) {
      const taken = await this.post(session.id, { state: 'preparing', at: new Date().toISOString() });
      if (taken === 'never') {
        this.done.add(session.id);
        return;
      }
      if (taken === 'later') throw new Error('billing did not take the preparing report');
      this.prepared.add(session.id);
    }
    const paidUntil = w.paid_until ? Date.parse(w.paid_until) : null;
    const readings = await this.deps.gpus.read();
    this.diskMb(readings.length);
    const missing = (session.gpuIndices ?? []).filter((i) => !readings.some((r) => r.index === i));
    if (missing.length > 0) {
      // A leased GPU the machine no longer shows: fail rather than run on fewer (or other) GPUs.
      this.done.add(session.id);
      await this.send(session.id, { state: 'failed', at: new Date().toISOString(), reason: 'gpu_unavailable' });
      return;
    }
    const dir = path.join(this.settings.run_dir, session.id);
    const logDir = path.join(dir, 'logs');
    mkdirSync(logDir, { recursive: true });
    chmodSync(dir, 0o711);
    // From here the directory is the keeper's, on disk too: whatever happens, it is uploaded or removed.
    const files = this.keeper.track(session.id, {
      keepsFiles: Boolean(w.logs),
      maxPathBytes: spec.output ? maxOutputPathBytes(spec.output) : 0,
      checkpointMaxBytes: spec.checkpoint ? maxCheckpointBytes(this.limits().diskBytes) : null,
    });
    const failed = async (reason: string) => {
      this.done.add(session.id);
      await this.keeper.drop(session.id);
      await this.send(session.id, { state: 'failed', at: new Date().toISOString(), reason });
    };
    const gone = async () => {
      this.done.add(session.id);
      await this.keeper.drop(session.id);
      await this.send(session.id, { state: 'stopped', at: new Date().toISOString(), reason: 'session_ended' });
    };
    const inputsDir = spec.inputs.length > 0 ? path.join(dir, 'inputs') : undefined;
    if (files && inputsDir) {
      try {
        rmSync(inputsDir, { recursive: true, force: true });
        await files.fetchInputs(inputsDir, this.limits().diskBytes);
      } catch (err) {
        this.deps.logger.warn({ err, session_id: session.id }, 'the workload inputs could not be fetched');
        await failed('inputs_unavailable');
        return;
      }
    }
    if (spec.image) {
      // Nothing of this daemon's starts before the containers an earlier life left are gone (tried at each poll).
      if (!this.orphansRemoved) throw new Error('the containers an earlier life left are still there');
      try {
        await pullImage(this.containers!, spec.image, durationMs(this.settings.image_pull_timeout));
      } catch (err) {
        this.deps.logger.warn({ err, session_id: session.id }, "the workload's image could not be pulled");
        // The machine's disk (or state): its fault; the image's registry or name: the renter's.
        await failed(err instanceof PullError && err.machineFault ? 'image_pull_failed' : 'image_unavailable');
        return;
      }
    }
    // A GPU leased anew may still be held by the workload of the session that had it, ending (its grace period), or
    // by one still launching whose session has not been seen to end: the new one starts once that one is gone (or
    // abandoned: it will start nothing), never beside it (still preparing, unbilled).
    const leased = session.gpuIndices ?? readings.map((r) => r.index);
    const holds = (gpus: readonly number[]) => gpus.some((i) => leased.includes(i));
    const launchingOn = () =>
      session.gpuIndices !== null &&
      [...this.launching].some(
        ([id, gpus]) => id !== session.id && gpus !== null && !this.abandoned.has(id) && holds(gpus),
      );
    while (
      !this.stopped &&
      !this.abandoned.has(session.id) &&
      ([...this.running.values()].some((r) => holds(r.gpus)) || launchingOn())
    ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    if (this.abandoned.has(session.id)) {
      // Its session ended while it prepared or waited for its GPUs: nothing ran, nothing is kept.
      await gone();
      return;
    }
    let disk: SessionDisk;
    try {
      this.diskKind ??= diskKind(this.settings, this.deps.logger);
      disk = await prepareDisk(dir, this.limits(), await this.diskKind, null);
    } catch (err) {
      // The machine could not make its disk (its own disk full, no loop device left): its fault, nothing ran.
      this.deps.logger.error({ err, session_id: session.id }, "the workload's disk could not be made");
      await failed('disk_unavailable');
      return;
    }
    // A program that is not there never starts, and so is never billed (a container's is looked up in its image).
    const problem = spec.command && !spec.image ? this.commandProblem(spec.command, disk, inputsDir) : null;
    const refused = async (reason: string) => {
      this.done.add(session.id);
      disk.close();
      await this.send(session.id, { state: 'failed', at: new Date().toISOString(), reason });
      await this.keeper.ended(session.id, false);
    };
    if (problem) {
      this.deps.logger.info({ session_id: session.id, reason: problem }, 'the workload program is not there to run');
      await refused(problem);
      return;
    }
    // Its user, kept for it from here: a job's last checkpoint is extracted as that user before it starts.
    const slot = this.freeSlot();
    this.reservedSlots.add(slot);
    try {
      if (files && spec.checkpoint) {
        try {
          await this.restoreCheckpoint(session.id, dir, disk, files, this.uidOf(slot));
        } catch (err) {
          this.deps.logger.warn({ err, session_id: session.id }, "the job's checkpoint could not be restored");
          await refused('checkpoint_unavailable');
          return;
        }
      }
      this.start(session, spec, readings, paidUntil, { disk, logDir, files, inputsDir, slot });
    } finally {
      this.reservedSlots.delete(slot);
    }
  }

  /** A workload's user: one of its own (by its slot) when the daemon runs as root; absent: the daemon's. */
  private uidOf(slot: number): number | undefined {
    return process.getuid?.() === 0 ? this.settings.uid_base + slot : undefined;
  }

  /**
   * The MB of disk each workload gets on this machine of `gpus` GPUs: `workloads.disk_mb`, or less where the disk
   * under the run directory cannot hold that much for a workload on each GPU at once (disk.ts `diskShareMb`; said once
   * in the log). Decided at the machine's first reading of its GPUs, which its record states (the market's `disk_mb`)
   * and each workload is given; a disk that cannot hold 16 MB a workload is an error, asked again next time.
   */
  diskMb(gpus: number): number {
    if (this.diskAllowanceMb !== undefined) return this.diskAllowanceMb;
    const configured = this.settings.disk_mb;
    const share = diskShareMb(this.settings.run_dir, gpus, this.settings.disk_files);
    if (share < MIN_DISK_MB) {
      throw new Error(
        `the disk under workloads.run_dir (${path.resolve(this.settings.run_dir)}) has room for ${share} MB a workload on each of the machine's ${gpus} GPUs: free some of it`,
      );
    }
    if (share < configured) {
      this.deps.logger.warn(
        { configured_mb: configured, given_mb: share, gpus },
        `the disk under workloads.run_dir holds less than workloads.disk_mb for a workload on each GPU: each gets ${share} MB`,
      );
    }
    this.diskAllowanceMb = Math.min(configured, share);
    return this.diskAllowanceMb;
  }

  /** A workload's limits here (its disk: diskMb, decided before any session runs). */
  private limits() {
    return workloadLimits(this.settings, this.diskAllowanceMb);
  }

  /**
   * The job's checkpoint directory in the new work directory (its user's), with the checkpoint the job kept last
   * extracted into it, when there is one (checkpoint.ts).
   */
  private async restoreCheckpoint(
    sessionId: string,
    dir: string,
    disk: SessionDisk,
    files: SessionFiles,
    uid: number | undefined,
  ): Promise<void> {
    const into = path.join(disk.workDir, CHECKPOINT_NAME);
    mkdirSync(into, { recursive: true });
    if (uid !== undefined) for (const d of [disk.workDir, into]) chownSync(d, uid, uid);
    const tar = path.join(dir, 'restore.tar');
    try {
      if (!(await files.fetchCheckpoint(tar, maxCheckpointBytes(this.limits().diskBytes)))) return;
      await unpack(tar, into, uid);
      this.deps.logger.info({ session_id: sessionId }, "the job's last checkpoint is restored");
    } finally {
      rmSync(tar, { force: true });
    }
  }

  /** Takes the checkpoint of each running job's workload that is due (and not under way). */
  private takeCheckpoints(): void {
    const now = Date.now();
    for (const [sessionId, r] of this.running) {
      const c = r.checkpoint;
      if (!c || !r.files || c.busy || now - c.at < c.everyMs) continue;
      c.busy = true;
      const out = path.join(this.settings.run_dir, sessionId, 'checkpoint-running.tar');
      const files = r.files;
      void (async () => {
        try {
          const max = maxCheckpointBytes(this.limits().diskBytes);
          await packRunning(r.sandbox.entry, path.join(this.settings.run_dir, '.checkpoints'), out, max);
          await files.keepCheckpoint(out);
        } catch (err) {
          this.deps.logger.warn({ err, session_id: sessionId }, "the job's checkpoint was not taken this time");
        } finally {
          rmSync(out, { force: true });
          c.at = Date.now();
          c.busy = false;
        }
      })();
    }
  }

  /** Why the sandbox's program cannot be started (command.ts), in the view the sandbox will have. */
  private commandProblem(command: string[], disk: SessionDisk, inputsDir: string | undefined) {
    const uid = process.getuid?.() === 0 ? this.settings.uid_base : null;
    return commandProblem(command[0]!, sandboxView({ disk, ...(inputsDir ? { inputsDir } : {}) }), {
      path: SANDBOX_PATH,
      cwd: '/work',
      uid,
    });
  }

  /** Starts the session's sandbox (or container) on its disk; its end is reported when it comes. */
  private start(
    session: RunningSession,
    spec: WorkloadSpec,
    readings: GpuReading[],
    paidUntil: number | null,
    place: {
      disk: SessionDisk;
      logDir: string;
      files: SessionFiles | null;
      inputsDir: string | undefined;
      slot: number;
    },
  ): void {
    const { disk, logDir, files, inputsDir, slot } = place;
    // A daemon stopping starts nothing more (its next life reports what was left preparing).
    if (this.stopped) {
      disk.close();
      return;
    }
    // Its session ended while it was preparing (its GPUs may be leased anew): it never starts.
    if (this.abandoned.has(session.id)) {
      this.done.add(session.id);
      disk.close();
      void this.send(session.id, { state: 'stopped', at: new Date().toISOString(), reason: 'session_ended' }).then(() =>
        this.keeper.ended(session.id, false),
      );
      return;
    }
    // Its output directory, uploaded at its end; its inputs' mount point (the inputs themselves are the daemon's).
    const output = path.join(disk.workDir, 'output');
    mkdirSync(output, { recursive: true });
    if (inputsDir) mkdirSync(path.join(disk.workDir, 'inputs'), { recursive: true });
    if (disk.tmpDir) chmodSync(disk.tmpDir, 0o1777);
    const uid = this.uidOf(slot);
    if (uid !== undefined) {
      for (const d of [disk.workDir, output, ...(disk.tmpDir ? [disk.tmpDir] : [])]) chownSync(d, uid, uid);
    }
    const leased = session.gpuIndices ?? readings.map((r) => r.index);
    const devices = this.deviceMap(readings);
    const gpus = leased
      .map((i) => readings.find((r) => r.index === i))
      .filter((r): r is GpuReading => r !== undefined)
      .map((r) => ({ index: r.index, uuid: r.uuid, device: devices.get(r.index)! }));
    const simulated = this.deps.gpus.kind === 'simulated';
    const common = {
      spec,
      disk,
      logDir,
      ...(inputsDir ? { inputsDir } : {}),
      controlDevices: simulated ? [] : controlDevices(),
      limits: this.limits(),
      uid,
      platformEnv: {
        GPU_PLATFORM_SESSION_ID: session.id,
        ...(spec.checkpoint ? { [CHECKPOINT_DIR.env]: CHECKPOINT_DIR.inside } : {}),
        [NOTICE_FILE.env]: NOTICE_FILE.inside,
      },
      stopGraceMs: durationMs(this.settings.stop_grace),
    };
    let sandbox: Sandbox;
    try {
      sandbox = spec.image
        ? startContainer({
            ...common,
            gpus,
            simulated,
            runtime: this.containers!,
            sessionId: session.id,
            daemon: path.resolve(this.settings.run_dir),
          })
        : startSandbox({
            ...common,
            gpus: gpus.map((g): SandboxGpu => ({ uuid: g.uuid, device: g.device })),
            hidden: this.hidden,
            bwrapPath: this.settings.bwrap_path,
            ...this.cgroupFor(session.id),
          });
    } catch (err) {
      this.done.add(session.id);
      disk.close();
      void this.send(session.id, { state: 'failed', at: new Date().toISOString(), reason: 'sandbox_refused' }).then(
        () => this.keeper.ended(session.id, false),
      );
      this.deps.logger.warn({ err, session_id: session.id }, 'the sandbox refused the workload');
      return;
    }
    this.running.set(session.id, {
      sandbox,
      slot,
      disk,
      files,
      gpus: leased,
      shippedAt: 0,
      paidUntil,
      paidAsked: Date.now(),
      // Taken from inside the workload while it runs (its own view, user and limits).
      checkpoint: spec.checkpoint
        ? { everyMs: spec.checkpoint.interval_seconds * 1000, at: Date.now(), busy: false }
        : null,
    });
    this.deps.logger.info({ session_id: session.id, gpus: leased, pid: sandbox.pid }, 'workload running');
    // Running from when the sandbox is set up (and its network up): a sandbox that never is reports `failed`.
    sandbox.ready.then(
      (at) => {
        // Its first process noted at once (a daemon that dies before the next poll leaves none unnoted).
        this.writeJournal();
        void this.send(session.id, { state: 'running', at: at.toISOString() });
      },
      () => {},
    );
    void sandbox.ended
      .then((end) => this.finish(session.id, end))
      .catch((err) => this.deps.logger.error({ err, session_id: session.id }, 'finishing a workload failed'));
  }

  /** How a renter's program enters the session's workload (reach/): null when none runs here. */
  entryOf(sessionId: string): Entry | null {
    return this.running.get(sessionId)?.sandbox.entry ?? null;
  }

  private async finish(sessionId: string, end: SandboxEnd): Promise<void> {
    const running = this.running.get(sessionId);
    this.running.delete(sessionId);
    this.ending.delete(sessionId);
    this.done.add(sessionId);
    running?.disk.close();
    const at = end.at.toISOString();
    const report: Report =
      end.state === 'exited'
        ? { state: 'exited', at, exit_code: Math.max(-255, Math.min(255, end.exitCode)) }
        : { state: end.state, at, reason: end.reason.replace(/[^a-z0-9_]/g, '_').slice(0, 200) || 'stopped' };
    this.deps.logger.info({ session_id: sessionId, ...report }, 'workload ended');
    // Billing first (its clock stops at the end), then the files: its logs whole, what it left in output/.
    await this.send(sessionId, report);
    await this.keeper.ended(sessionId);
  }

  /** Uploads the logs of running workloads that are due (every `workloads.log_interval`). */
  private shipLogs(): void {
    const now = Date.now();
    for (const r of this.running.values()) {
      if (!r.files || now - r.shippedAt < durationMs(this.settings.log_interval)) continue;
      r.shippedAt = now;
      void r.files.shipLogs();
    }
  }

  /** Sends a report after the session's earlier ones; kept and sent again at the next poll when billing cannot take it. */
  private send(sessionId: string, report: Report): Promise<void> {
    const list = this.unsent.get(sessionId) ?? [];
    list.push(report);
    this.unsent.set(sessionId, list);
    return this.drain(sessionId);
  }

  /** Sends the session's unsent reports in order, after any sending under way; stops at the first that fails. */
  private drain(sessionId: string): Promise<void> {
    const next = (this.sending.get(sessionId) ?? Promise.resolve()).then(async () => {
      const list = this.unsent.get(sessionId) ?? [];
      while (list.length > 0) {
        const report = list[0]!;
        const taken = await this.post(sessionId, report);
        if (taken === 'later') break;
        list.shift();
        // Billing refused `running`: the session ended meanwhile; nothing of it may run on.
        if (taken === 'never' && report.state === 'running')
          void this.running.get(sessionId)?.sandbox.stop('session_ended');
      }
      if (list.length === 0) this.unsent.delete(sessionId);
    });
    this.sending.set(sessionId, next);
    return next;
  }

  /**
   * Whether billing took the report (`taken`), never will (`never`: an end after another end, a session that ended or
   * that it does not know), or may later (`later`: sent again at the next poll).
   */
  private async post(sessionId: string, report: Report): Promise<'taken' | 'never' | 'later'> {
    try {
      const send = (headers: TraceContext) =>
        this.billing.POST('/api/v1/billing/sessions/{sessionID}/workload/state', {
          params: { path: { sessionID: sessionId } },
          body: report,
          headers,
        });
      const name = `report workload ${report.state}`;
      const result = await (this.deps.traces?.report(sessionId, name, 'internal', send) ?? send({}));
      const status = result.response.status;
      if (result.response.ok) return 'taken';
      if (status === 404 || status === 409) {
        this.deps.logger.info({ session_id: sessionId, status, state: report.state }, 'billing declined a report');
        return 'never';
      }
      this.deps.logger.warn({ session_id: sessionId, status }, 'workload report refused; sent again at the next poll');
    } catch (err) {
      this.deps.logger.warn({ err, session_id: sessionId }, 'workload report failed; sent again at the next poll');
    }
    return 'later';
  }

  private async flushReports(): Promise<void> {
    await Promise.all([...this.unsent.keys()].map((id) => this.drain(id)));
  }

  /** The sandbox's control group with the machine's limits, when one can be made (else a warning: the watch alone). */
  private cgroupFor(sessionId: string): { cgroup?: WorkloadCgroup } {
    if (!this.cgroups) return {};
    try {
      return {
        cgroup: workloadCgroup(this.cgroups, sessionId, this.limits()),
      };
    } catch (err) {
      this.deps.logger.warn({ err, session_id: sessionId }, 'the workload gets no control group: the watch alone');
      return {};
    }
  }

  private freeSlot(): number {
    const taken = new Set([...this.running.values()].map((r) => r.slot).concat([...this.reservedSlots]));
    let slot = 0;
    while (taken.has(slot)) slot++;
    return slot;
  }

  private deviceMap(readings: GpuReading[]): Map<number, string> {
    this.devices ??=
      this.deps.gpus.kind === 'simulated'
        ? simulatedDevices(path.join(this.settings.run_dir, 'simulated-dev'), readings)
        : nvidiaDevices(readings);
    return this.devices;
  }

  /**
   * When the previous life of this daemon last knew its workloads alive (now, when it never ran); a journal cut short
   * says it by when it was last written.
   */
  private readJournal(): Date {
    const file = path.join(this.settings.run_dir, JOURNAL);
    try {
      const journal = JSON.parse(readFileSync(file, 'utf8')) as { alive_at?: string; sandboxes?: unknown };
      this.leftSandboxes(journal.sandboxes);
      const at = new Date(journal.alive_at ?? '');
      if (!Number.isNaN(at.getTime())) return at;
    } catch {}
    try {
      return statSync(file).mtime;
    } catch {
      return new Date();
    }
  }

  /**
   * Kills the sandboxes the previous life left running (the first processes its journal noted): one whose first process
   * outlived the daemon's death (its parent-death signal did not hold) would run on unbilled.
   */
  private leftSandboxes(noted: unknown): void {
    if (!Array.isArray(noted)) return;
    const inits = noted.filter(
      (r): r is ProcessRef => Number.isInteger(r?.pid) && r.pid > 1 && typeof r?.start === 'string',
    );
    const killed = killLeftSandboxes(inits);
    if (killed.length > 0) {
      this.deps.logger.warn({ pids: killed }, 'killed the sandboxes an earlier life of the daemon left running');
    }
  }

  /**
   * Notes that the daemon is alive, and the first process of each sandbox it runs (for its next life to end, should
   * one outlive it); a run directory that cannot take it (its disk full) is said, never thrown.
   */
  private writeJournal(): void {
    const file = path.join(this.settings.run_dir, JOURNAL);
    const sandboxes = [...this.running.values()].flatMap((r) => initOf(r.sandbox) ?? []);
    try {
      writeDurably(file, JSON.stringify({ alive_at: new Date().toISOString(), sandboxes }));
    } catch (err) {
      this.deps.logger.warn({ err }, 'the journal could not be written (the run directory full?)');
    }
  }
}
