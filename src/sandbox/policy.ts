import type { LifecyclePolicy, MaxLifetimeAction } from './types.js';
import { DEFAULT_POLICY, LIFECYCLE_POLICIES } from './types.js';

/** What the cleanup loop knows of one box at one tick. */
export interface BoxActivity {
  policy: LifecyclePolicy;
  now: number;
  createdAt: number;
  /** Latest external call or heartbeat (epoch ms). */
  lastActive: number;
  /** Execs, streams or attachments open right now. */
  inFlight: number;
  /** Execs that have finished. */
  execsCompleted: number;
  running: boolean;
  /** 0 = no idle timeout. */
  idleTimeoutMs: number;
  /** Idle time before a pause (the idle ladder's first step); 0 or absent = never. */
  idlePauseMs?: number;
  /** The box is paused now (absent: not). */
  paused?: boolean;
  /** The box's runtime can pause it (`capabilities.pause`); absent means true. */
  pausable?: boolean;
  /** Idle time before an archive (the idle ladder's second step); 0 or absent = never. */
  idleArchiveMs?: number;
  /** The box is archived now (absent: not). */
  archived?: boolean;
  /** The box's pool can archive it (`capabilities.commit`); absent means true. */
  archivable?: boolean;
  /** 0 = no limit. */
  maxLifetimeMs: number;
  /** What the end of the max lifetime does (absent: remove). */
  maxLifetimeAction?: MaxLifetimeAction;
  /** The box's runtime can start it again after a stop (`capabilities.stopStart`); absent means true. */
  restartable?: boolean;
}

export type CleanupAction =
  | { action: 'keep' }
  | { action: 'stop' | 'remove'; reason: 'idle' | 'lifetime' | 'oneshot' }
  | { action: 'pause'; reason: 'idle' | 'lifetime' }
  | { action: 'archive'; reason: 'idle' };

/**
 * The lifecycle policy table, in one place:
 *
 * | policy      | idle            | max lifetime | other                           |
 * |-------------|-----------------|--------------|---------------------------------|
 * | oneshot     | remove          | remove       | removed once its first exec ends |
 * | session     | remove          | remove       |                                 |
 * | longrunning | stop (keep data)| remove       | removed instead of stopped where a stop cannot be undone (Kubernetes) |
 * | persistent  | never           | never        |                                 |
 *
 * A box whose `maxLifetimeAction` is `pause` is paused at the end of its max lifetime instead of
 * removed (where it can be paused), and its lifetime is over.
 *
 * Before the idle step, the idle ladder's pause (`idlePauseMs`) and archive (`idleArchiveMs`), for
 * any policy, persistent too (neither loses a file): a running box idle that long is paused, a box
 * idle longer archived, where its pool can.
 *
 * Work in flight (an open exec, stream or attachment) is activity "now": such a box is never
 * idle. Max lifetime is a hard cap and applies even then, so a stuck stream cannot keep a box
 * past the limit its pool promises.
 */
export function decideCleanup(b: BoxActivity): CleanupAction {
  if (b.policy !== 'persistent' && b.maxLifetimeMs > 0 && b.now - b.createdAt >= b.maxLifetimeMs) {
    // Paused at its end where it can be (a stopped box only has its lifetime ended), else removed.
    const pause = b.maxLifetimeAction === 'pause' && b.pausable !== false;
    return { action: pause ? 'pause' : 'remove', reason: 'lifetime' };
  }
  if (b.inFlight > 0) return { action: 'keep' };
  if (b.policy === 'persistent') return idleLadder(b);
  if (b.policy === 'oneshot' && b.execsCompleted > 0) return { action: 'remove', reason: 'oneshot' };
  const idle = b.idleTimeoutMs > 0 && b.now - b.lastActive >= b.idleTimeoutMs;
  if (!idle) return idleLadder(b);
  // Where a stopped box can never run again (a pod), stopping would only strand its record.
  if (b.policy === 'longrunning' && b.restartable !== false) return b.running ? { action: 'stop', reason: 'idle' } : { action: 'keep' };
  return { action: 'remove', reason: 'idle' };
}

/**
 * The idle ladder's steps before the idle timeout: archive a box idle for `idleArchiveMs` (running,
 * paused or stopped: not yet archived), else pause a running box idle for `idlePauseMs`, each where
 * the pool can.
 */
function idleLadder(b: BoxActivity): CleanupAction {
  const idle = b.now - b.lastActive;
  const archiveAfter = b.idleArchiveMs ?? 0;
  if (archiveAfter > 0 && idle >= archiveAfter && !b.archived && b.archivable !== false) return { action: 'archive', reason: 'idle' };
  const pauseAfter = b.idlePauseMs ?? 0;
  const pause = pauseAfter > 0 && idle >= pauseAfter && b.running && !b.paused && b.pausable !== false;
  return pause ? { action: 'pause', reason: 'idle' } : { action: 'keep' };
}

/** An empty or unknown policy (e.g. a hand-edited label) means the default, never "immortal". */
export function normalizePolicy(value: string | undefined): LifecyclePolicy {
  return (LIFECYCLE_POLICIES as readonly string[]).includes(value ?? '') ? (value as LifecyclePolicy) : DEFAULT_POLICY;
}

/**
 * When `decideCleanup` next acts on this box if nothing about it changes (no use, nothing new in
 * flight, its status as it is): `b.now` when it acts already, undefined when it never would. The
 * Manager arms a box's deadline timer with it, so the table above stays the one place that decides.
 *
 * Every rule of the table is a threshold in time (`now - since >= ms`), so the decision is constant
 * between thresholds and the first time it acts is one of them: each is tried in order through
 * decideCleanup itself. A use only moves the idle thresholds later; whatever can move one sooner
 * (a create, a renewed lifetime, work in flight ending, a status change) asks again.
 */
export function nextDue(b: BoxActivity): number | undefined {
  const thresholds = [
    b.now,
    b.maxLifetimeMs > 0 ? b.createdAt + b.maxLifetimeMs : undefined,
    b.idleTimeoutMs > 0 ? b.lastActive + b.idleTimeoutMs : undefined,
    (b.idlePauseMs ?? 0) > 0 ? b.lastActive + b.idlePauseMs! : undefined,
    (b.idleArchiveMs ?? 0) > 0 ? b.lastActive + b.idleArchiveMs! : undefined,
  ].filter((t): t is number => t !== undefined && t >= b.now);
  thresholds.sort((x, y) => x - y);
  return thresholds.find((t) => decideCleanup({ ...b, now: t }).action !== 'keep');
}
