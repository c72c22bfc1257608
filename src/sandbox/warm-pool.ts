import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { isSbxError } from '../errors.js';
import type { ContainerEvent, ContainerSummary, EgressSpec } from '../runtime/types.js';
import type { WarmTemplate } from './config.js';
import type { Pool } from './pool.js';
import type { CreateOptions, WarmInfo } from './types.js';
import { WARM_LABEL, matchTemplate, spareSpec, templateKey } from './warm.js';

const MAX_BACKOFF_MS = 30_000;

interface Slot {
  template: WarmTemplate;
  key: string;
  /** Started spares whose agent answered, oldest first. */
  ready: string[];
  hits: number;
  misses: number;
  replaced: number;
  failures: number;
}

/**
 * The spares of one pool: kept at each template's size by one background filler (never on a
 * create's path; one engine create at a time, as this machine has few cores), handed out by
 * `take`, reconciled against the engine's list on every pass, replaced when they die.
 */
export class WarmPool {
  private slots = new Map<string, Slot>();
  /** Spares being made or being claimed: a list taken meanwhile must not adopt or drop them. */
  private readonly busy = new Set<string>();
  private filling: Promise<void> | undefined;
  private readonly stop = new AbortController();
  private consecutiveFailures = 0;
  private lastClaimMs: number | undefined;
  /** The egress rules each spare this pool made was created with (JSON): a claim that wants others sets them. */
  private readonly spareEgress = new Map<string, string>();

  constructor(
    private readonly pool: Pool,
    private readonly manager: string,
    private readonly log: Logger,
    /** A spare's egress rules (the pool's policy), where the runtime enforces egress. */
    private readonly egressFor: (template: WarmTemplate) => Promise<EgressSpec | undefined> = () => Promise.resolve(undefined),
  ) {}

  /** The templates as keyed now (the key depends on the engine machine's size, known after the first list). */
  private refreshSlots(): void {
    const next = new Map<string, Slot>();
    for (const template of this.pool.def.warm) {
      const key = templateKey(template, this.pool.def, this.pool.resources);
      next.set(key, this.slots.get(key) ?? { template, key, ready: [], hits: 0, misses: 0, replaced: 0, failures: 0 });
    }
    this.slots = next;
  }

  /** The key of the template a create fits, or undefined (a cold create). */
  match(opts: CreateOptions): string | undefined {
    if (this.pool.def.warm.length === 0) return undefined;
    this.refreshSlots();
    const t = matchTemplate(opts, this.pool.def, this.pool.resources);
    return t ? templateKey(t, this.pool.def, this.pool.resources) : undefined;
  }

  /**
   * Hands a ready spare of the template to a claim: `greet` first (the Manager hands the box's
   * identity to the spare's agent; true when the agent took it, which proves the spare runs),
   * else one inspect (a spare can die while it waits), then `save` records the claim (durably:
   * only then is it no longer a spare). The container id, or undefined when no spare is left (a
   * miss: the caller creates cold). A spare whose claim cannot be saved is removed, not handed
   * out. `egress`: the claiming box's rules, put in force on the spare before the claim is saved
   * when the spare was not made with them (an error then removes the spare and fails the claim).
   */
  async claim(
    key: string,
    save: (containerId: string) => Promise<void>,
    egress?: EgressSpec,
    greet: (containerId: string) => Promise<boolean> = async () => false,
  ): Promise<string | undefined> {
    const started = performance.now();
    for (let id = this.take(key); id !== undefined; id = this.take(key)) {
      // An agent that answered runs in a running box: the engine need not be asked.
      const running =
        (await greet(id).catch(() => false)) ||
        (await this.pool
          .runtime()
          .inspect(id)
          .then((c) => c.running)
          .catch(() => false));
      if (!running) {
        await this.discard(key, id);
        continue;
      }
      try {
        if (egress && this.spareEgress.get(id) !== JSON.stringify(egress)) await this.pool.runtime().setEgress!(id, egress);
        await save(id);
      } catch (err) {
        await this.discard(key, id);
        throw err;
      }
      this.spareEgress.delete(id);
      this.claimed(key, id, performance.now() - started);
      return id;
    }
    return undefined;
  }

  private take(key: string): string | undefined {
    const slot = this.slots.get(key);
    const id = slot?.ready.shift();
    if (!slot) return undefined;
    if (id === undefined) {
      slot.misses++;
      this.refill();
      return undefined;
    }
    this.busy.add(id);
    return id;
  }

  private claimed(key: string, id: string, ms: number): void {
    this.busy.delete(id);
    const slot = this.slots.get(key);
    if (slot) slot.hits++;
    this.lastClaimMs = ms;
    this.refill();
  }

  /** A taken spare that turned out dead, or whose claim failed: removed and replaced. */
  private async discard(key: string, id: string): Promise<void> {
    const slot = this.slots.get(key);
    if (slot) slot.replaced++;
    await this.removeSpare(id);
    this.busy.delete(id);
    this.refill();
  }

  /**
   * Joins the engine's view: spares listed for this pool (containers with the warm label and no
   * claim). Ready spares that vanished or stopped are forgotten and replaced; listed ones this
   * pool does not know are adopted when running and of a current template (a restarted Manager),
   * otherwise removed (a changed config, a dead spare, more than the size).
   */
  async sync(listed: ContainerSummary[]): Promise<void> {
    this.refreshSlots();
    const running = new Map(listed.filter((c) => c.running).map((c) => [c.id, c]));
    for (const slot of this.slots.values()) {
      const alive = slot.ready.filter((id) => running.has(id));
      slot.replaced += slot.ready.length - alive.length;
      slot.ready = alive;
    }
    const known = new Set([...this.slots.values()].flatMap((s) => s.ready));
    const remove: string[] = [];
    for (const c of listed) {
      if (known.has(c.id) || this.busy.has(c.id)) continue;
      // The filler's own create, listed before its answer arrived: not started yet, not stale.
      if (c.status === 'created' && this.filling) continue;
      const slot = this.slots.get(c.labels[WARM_LABEL] ?? '');
      if (c.running && slot && slot.ready.length < slot.template.size && (await this.isReady(c.id))) slot.ready.push(c.id);
      else remove.push(c.id);
    }
    for (const id of remove) await this.removeSpare(id);
    if (remove.length > 0) this.log.info({ pool: this.pool.name, removed: remove.length }, 'removed spares of no current template, stopped or over size');
    this.refill();
  }

  /** A container event of a spare: one that stopped or went away is replaced. */
  onEvent(e: ContainerEvent): void {
    if (e.action !== 'stopped' && e.action !== 'removed') return;
    for (const slot of this.slots.values()) {
      const i = slot.ready.indexOf(e.id);
      if (i < 0) continue;
      slot.ready.splice(i, 1);
      slot.replaced++;
      if (e.action === 'stopped') void this.removeSpare(e.id);
      this.log.warn({ pool: this.pool.name, container: e.id, action: e.action }, 'a spare died; replacing it');
      this.refill();
    }
  }

  /** Starts the filler unless it runs already. */
  refill(): void {
    if (this.filling || this.stop.signal.aborted || this.pool.def.warm.length === 0) return;
    this.filling = this.fill().finally(() => (this.filling = undefined));
  }

  private async fill(): Promise<void> {
    while (!this.stop.signal.aborted) {
      this.refreshSlots();
      const slot = [...this.slots.values()].find((s) => s.ready.length < s.template.size);
      if (!slot) return;
      try {
        const id = await this.makeSpare(slot);
        if (this.stop.signal.aborted || !this.slots.has(slot.key)) await this.removeSpare(id);
        else slot.ready.push(id);
        this.consecutiveFailures = 0;
      } catch (err) {
        slot.failures++;
        this.consecutiveFailures++;
        const backoff = Math.min(MAX_BACKOFF_MS, 500 * 2 ** (this.consecutiveFailures - 1));
        this.log.warn({ pool: this.pool.name, image: slot.template.image, err, retryInMs: backoff }, 'could not make a warm spare');
        try {
          await sleep(backoff, undefined, { signal: this.stop.signal });
        } catch {
          return;
        }
      }
    }
  }

  private async makeSpare(slot: Slot): Promise<string> {
    const runtime = this.pool.runtime();
    const spareId = `warm-${randomBytes(6).toString('hex')}`;
    const egress = await this.egressFor(slot.template);
    const spec = spareSpec({
      manager: this.manager,
      pool: this.pool.def,
      template: slot.template,
      key: slot.key,
      spareId,
      now: Date.now(),
      machine: this.pool.resources,
      keepSpec: runtime.capabilities.commit !== false,
      egress,
    });
    const id = await runtime.create(spec);
    if (egress) this.spareEgress.set(id, JSON.stringify(egress));
    this.busy.add(id);
    try {
      await runtime.start(id);
      if (!(await this.isReady(id))) throw new Error(`spare ${spareId} is not running after its start`);
      return id;
    } catch (err) {
      await this.removeSpare(id);
      throw err;
    } finally {
      this.busy.delete(id);
    }
  }

  /**
   * Running, and its exec path settled: right after a start the runtime's inspect waits (about
   * 2 s at most) for the box's agent to answer before it reports the path, so a spare is handed
   * out only once its first exec will find the agent.
   */
  private async isReady(id: string): Promise<boolean> {
    const c = await this.pool
      .runtime()
      .inspect(id)
      .catch(() => undefined);
    return c?.running === true;
  }

  private async removeSpare(id: string): Promise<void> {
    this.spareEgress.delete(id);
    try {
      await this.pool.runtime().remove(id, { force: true });
    } catch (err) {
      if (!isSbxError(err, 'not_found')) this.log.error({ pool: this.pool.name, container: id, err }, 'could not remove a spare');
    }
  }

  /** Removes every spare (removePool): waits for the filler first. */
  async removeAll(): Promise<void> {
    await this.close();
    const ids = [...this.slots.values()].flatMap((s) => s.ready.splice(0));
    await Promise.all(ids.map((id) => this.removeSpare(id)));
  }

  /** Stops the filler; spares stay running for the next Manager to adopt. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.filling;
  }

  info(): WarmInfo[] {
    this.refreshSlots();
    return [...this.slots.values()].map((s) => ({
      pool: this.pool.name,
      image: s.template.image,
      key: s.key,
      size: s.template.size,
      ready: s.ready.length,
      hits: s.hits,
      misses: s.misses,
      replaced: s.replaced,
      failures: s.failures,
      ...(this.lastClaimMs !== undefined ? { lastClaimMs: this.lastClaimMs } : {}),
    }));
  }
}
