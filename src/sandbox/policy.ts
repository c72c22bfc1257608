import type { LifecyclePolicy } from './types.js';
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
  /** 0 = no limit. */
  maxLifetimeMs: number;
  /** The box's runtime can start it again after a stop (`capabilities.stopStart`); absent means true. */
  restartable?: boolean;
}

export type CleanupAction = { action: 'keep' } | { action: 'stop' | 'remove'; reason: 'idle' | 'lifetime' | 'oneshot' };

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
 * Work in flight (an open exec, stream or attachment) is activity "now": such a box is never
 * idle. Max lifetime is a hard cap and applies even then, so a stuck stream cannot keep a box
 * past the limit its pool promises.
 */
export function decideCleanup(b: BoxActivity): CleanupAction {
  if (b.policy === 'persistent') return { action: 'keep' };
  if (b.maxLifetimeMs > 0 && b.now - b.createdAt >= b.maxLifetimeMs) return { action: 'remove', reason: 'lifetime' };
  if (b.inFlight > 0) return { action: 'keep' };
  if (b.policy === 'oneshot' && b.execsCompleted > 0) return { action: 'remove', reason: 'oneshot' };
  const idle = b.idleTimeoutMs > 0 && b.now - b.lastActive >= b.idleTimeoutMs;
  if (!idle) return { action: 'keep' };
  // Where a stopped box can never run again (a pod), stopping would only strand its record.
  if (b.policy === 'longrunning' && b.restartable !== false) return b.running ? { action: 'stop', reason: 'idle' } : { action: 'keep' };
  return { action: 'remove', reason: 'idle' };
}

/** An empty or unknown policy (e.g. a hand-edited label) means the default, never "immortal". */
export function normalizePolicy(value: string | undefined): LifecyclePolicy {
  return (LIFECYCLE_POLICIES as readonly string[]).includes(value ?? '') ? (value as LifecyclePolicy) : DEFAULT_POLICY;
}
