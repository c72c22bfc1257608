import { Writable } from 'node:stream';
import { Exec, Watch } from '@kubernetes/client-node';
import type { CoreV1Api, KubeConfig, V1Pod, V1Status } from '@kubernetes/client-node';
import { KubernetesRuntime } from '../../src/runtime/kubernetes/runtime.js';
import type { KubernetesRuntimeOptions } from '../../src/runtime/kubernetes/runtime.js';
import { RAW_CONTAINER, rawPod, sbxBoxSpec } from './kube-pod.js';
import type { BoxRef, ExecOutcome, Subject } from './subject.js';

/** How long either side waits for a pod to be ready or gone (a first start on a busy node). */
const WAIT_MS = 60_000;

/** Boxes as pods through sbx's KubernetesRuntime: create + start (ready), exec, remove with force. */
export class KubeRuntimeSubject implements Subject {
  readonly runtime: KubernetesRuntime;

  /** `name` names the side in the table; `options` make the variants (e.g. `agentImage`). */
  constructor(
    readonly name: string,
    address: string,
    private readonly labels: Record<string, string>,
    options: KubernetesRuntimeOptions = {},
  ) {
    this.runtime = new KubernetesRuntime(address, { readyTimeoutMs: WAIT_MS, ...options });
  }

  async create(): Promise<BoxRef> {
    const id = await this.runtime.create(sbxBoxSpec(this.labels));
    try {
      await this.runtime.start(id);
    } catch (err) {
      await this.runtime.remove(id, { force: true }).catch(() => undefined);
      throw err;
    }
    return { id };
  }
  async exec(box: BoxRef, cmd: string[]): Promise<ExecOutcome> {
    const r = await this.runtime.exec(box.id, cmd);
    return { exitCode: r.exitCode, stdoutBytes: Buffer.byteLength(r.stdout) };
  }
  async info(box: BoxRef): Promise<void> {
    await this.runtime.inspect(box.id);
  }
  stop(): Promise<void> {
    return Promise.reject(new Error('a pod cannot be stopped and started again'));
  }
  start(): Promise<void> {
    return this.stop();
  }
  remove(box: BoxRef): Promise<void> {
    return this.runtime.remove(box.id, { force: true });
  }
  close(): Promise<void> {
    return this.runtime.close();
  }
}

/** What a watch event means to the waiter: done, failed, or (undefined) wait on. */
type Verdict = 'done' | Error | undefined;

/** The exit code in an exec's v1.Status (channel 3): Success is 0, NonZeroExitCode carries it. */
function exitCodeOf(status: V1Status | undefined): number {
  if (status?.status === 'Success') return 0;
  const code = status?.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
  if (status?.reason === 'NonZeroExitCode' && code !== undefined) return Number(code);
  throw new Error(`exec ended without an exit status: ${JSON.stringify(status ?? null)}`);
}

/**
 * The baseline: plain @kubernetes/client-node doing the same work as the runtime. Create is
 * createNamespacedPod plus a Watch on that pod (from the create's resourceVersion) until it is
 * Running with `main` ready; exec is client-node's own `Exec` (v5 WebSocket, v4 fallback), done when
 * the status came and the socket closed; remove is deleteNamespacedPod with grace 0, then a read:
 * 404, else a Watch from the read's resourceVersion until DELETED.
 */
export class RawKubeSubject implements Subject {
  readonly name = 'raw';
  private readonly watcher: Watch;
  private readonly execer: Exec;

  constructor(
    config: KubeConfig,
    private readonly core: CoreV1Api,
    private readonly namespace: string,
    private readonly labels: Record<string, string>,
  ) {
    this.watcher = new Watch(config);
    this.execer = new Exec(config);
  }

  async create(): Promise<BoxRef> {
    const created = await this.core.createNamespacedPod({ namespace: this.namespace, body: rawPod(this.labels) });
    const name = created.metadata!.name!;
    try {
      await this.watchPod(name, created.metadata!.resourceVersion!, 'ready', (type, pod) => {
        if (type === 'DELETED') return new Error(`pod ${name} was deleted while starting`);
        const main = pod.status?.containerStatuses?.find((c) => c.name === RAW_CONTAINER);
        if (pod.status?.phase === 'Running' && main?.ready) return 'done';
        if (pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded') return new Error(`pod ${name} ended: ${pod.status.phase}`);
        const waiting = main?.state?.waiting?.reason;
        return waiting && /^(ErrImageNeverPull|InvalidImageName|CreateContainer(Config)?Error|RunContainerError)$/.test(waiting)
          ? new Error(`pod ${name}: ${waiting}`)
          : undefined;
      });
    } catch (err) {
      await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
      throw err;
    }
    return { id: name };
  }

  async exec(box: BoxRef, cmd: string[]): Promise<ExecOutcome> {
    let stdoutBytes = 0;
    const stdout = new Writable({
      write(chunk: Buffer, _enc, cb) {
        stdoutBytes += chunk.length;
        cb();
      },
    });
    const stderr = new Writable({ write: (_chunk, _enc, cb) => cb() });
    let status: V1Status | undefined;
    const ws = await this.execer.exec(this.namespace, box.id, RAW_CONTAINER, cmd, stdout, stderr, null, false, (s) => (status = s));
    if (ws.readyState !== ws.CLOSED) await new Promise((resolve) => ws.once('close', resolve));
    return { exitCode: exitCodeOf(status), stdoutBytes };
  }

  async info(box: BoxRef): Promise<void> {
    await this.core.readNamespacedPod({ name: box.id, namespace: this.namespace });
  }
  stop(): Promise<void> {
    return Promise.reject(new Error('a pod cannot be stopped and started again'));
  }
  start(): Promise<void> {
    return this.stop();
  }

  async remove(box: BoxRef): Promise<void> {
    const name = box.id;
    await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 0 });
    let pod: V1Pod;
    try {
      pod = await this.core.readNamespacedPod({ name, namespace: this.namespace });
    } catch (err) {
      if ((err as { code?: number }).code === 404) return;
      throw err;
    }
    await this.watchPod(name, pod.metadata!.resourceVersion!, 'gone', (type) => (type === 'DELETED' ? 'done' : undefined));
  }

  async close(): Promise<void> {}

  /** Watches one pod from `resourceVersion` until `verdict` says done (or an error, or WAIT_MS). */
  private watchPod(name: string, resourceVersion: string, what: string, verdict: (type: string, pod: V1Pod) => Verdict): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      let controller: AbortController | undefined;
      const finish = (err?: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        controller?.abort();
        if (err) reject(err instanceof Error ? err : new Error(String(err)));
        else resolve();
      };
      const timer = setTimeout(() => finish(new Error(`pod ${name} not ${what} within ${WAIT_MS} ms`)), WAIT_MS);
      this.watcher
        .watch(
          `/api/v1/namespaces/${this.namespace}/pods`,
          { fieldSelector: `metadata.name=${name}`, resourceVersion },
          (type: string, pod: V1Pod) => {
            const v = verdict(type, pod);
            if (v === 'done') finish();
            else if (v) finish(v);
          },
          (err: unknown) => finish(err ?? new Error(`the watch of pod ${name} ended before it was ${what}`)),
        )
        .then((c) => {
          controller = c;
          if (settled) c.abort();
        }, finish);
    });
  }
}
