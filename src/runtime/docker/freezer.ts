/**
 * Pause and unpause that end where they were asked to, on an engine whose paused flag lags.
 *
 * Docker keeps a paused flag of its own. The API call sets it, and containerd's event for the
 * same transition sets it again when the engine gets to that event, which on a busy engine can be
 * after a later call (moby's daemon/monitor.go): pause, unpause, then the pause's late event
 * leaves the flag saying paused about a running container until the unpause's event follows;
 * pause, unpause, pause can leave it saying running about a frozen one. The engine refuses a call
 * by its flag ("already paused", "is not paused") without asking containerd, so such a refusal
 * says nothing about the container; an unpause taken at its word there leaves a frozen box whose
 * every exec hangs. A call the flag lets through is answered by containerd, whose state is the
 * container's. So a refusal by the flag is checked with the opposite call, and a flag known to be
 * stale is waited out: the event that corrects it is already on its way.
 */
import { SbxError } from '../../errors.js';

export interface FreezerEngine {
  /** The engine's pause (`true`) or unpause (`false`) call: rejects with the engine's words. */
  set(paused: boolean): Promise<void>;
  /** The engine's view now: its paused flag, and whether the container runs at all. */
  read(): Promise<{ paused: boolean; running: boolean }>;
}

/** How the engine took one call: done, refused by its flag, or refused by containerd (already so). */
type Answer = 'done' | 'flag' | 'containerd';

const REFUSED = {
  // The engine's own refusals, by its flag (daemon/pause.go, daemon/unpause.go).
  flag: { pause: /is already paused/i, unpause: /is not paused/i },
  // containerd's, by the task's real state (pkg/process/init_state.go): the container is so already.
  containerd: { pause: /cannot pause a paused/i, unpause: /cannot resume a running/i },
};

/** At most this many pause/probe rounds: each ends in a state containerd confirmed unless another client races us. */
const ROUNDS = 4;
/** The flag's correcting event is already sent; this only bounds an engine that never delivers it. */
const FLAG_WAIT_MS = 30_000;

async function ask(engine: FreezerEngine, paused: boolean): Promise<Answer> {
  try {
    await engine.set(paused);
    return 'done';
  } catch (err) {
    const text = String((err as Error | undefined)?.message);
    const call = paused ? 'pause' : 'unpause';
    if (REFUSED.flag[call].test(text)) return 'flag';
    if (REFUSED.containerd[call].test(text)) return 'containerd';
    throw err;
  }
}

/** Until the engine's flag reads `paused` (or the container no longer runs: no flag to wait for). */
async function untilFlag(engine: FreezerEngine, paused: boolean, what: string): Promise<void> {
  const deadline = Date.now() + FLAG_WAIT_MS;
  for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
    const now = await engine.read();
    if (!now.running || now.paused === paused) return;
    if (Date.now() > deadline) {
      throw new SbxError('internal', `${what}: the engine still says ${now.paused ? 'paused' : 'running'} ${FLAG_WAIT_MS} ms after containerd said otherwise`, {
        details: { paused },
      });
    }
    await new Promise((r) => setTimeout(r, delay));
  }
}

/**
 * Brings the container to `paused` (frozen) or not, as containerd confirms, and returns once the
 * engine's flag says so too, so the engine's next call (an exec, a checkpoint) sees the truth.
 */
export async function setPaused(engine: FreezerEngine, paused: boolean, what: string): Promise<void> {
  for (let round = 0; round < ROUNDS; round++) {
    const answer = await ask(engine, paused);
    if (answer === 'done') return;
    if (answer === 'containerd') return untilFlag(engine, paused, what);
    // A container that does not run is not paused (the engine clears the flag at an exit): an
    // unpause has nothing to do, and a pause is asked again for the engine to say why not.
    if (!(await engine.read()).running) return paused ? engine.set(true) : undefined;
    // The flag says it is so already. containerd knows: ask it the opposite.
    const probe = await ask(engine, !paused);
    // It is the opposite, and the flag is stale: wait for its event, then make the call again.
    if (probe === 'containerd') await untilFlag(engine, !paused, what);
    // 'done': it was so, and is not now; 'flag': the flag moved meanwhile. Either way, again.
  }
  throw new SbxError('conflict', `${what}: its paused state keeps changing under sbx (another client pausing and unpausing it?)`, {
    details: { paused },
  });
}
