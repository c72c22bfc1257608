/**
 * A remote node for the Remote rows: a network namespace with a Docker Engine of its own
 * (src/testing/netns-engine.ts, the tests' second machine) and `sbx node` running INSIDE it as a
 * separate process, joined (direct mode, mutual TLS) to the bench's Manager, which dials it at
 * the namespace's address over the veth link. So a remote op crosses a real network stack and a
 * process boundary, as on two machines, while both engines share this machine's disk and cores.
 */
import type { ChildProcess } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Manager } from '../../src/sandbox/manager.js';
import { netnsLayout, startNetnsEngine, stopNetnsEngine } from '../../src/testing/netns-engine.js';
import type { NetnsEngine } from '../../src/testing/netns-engine.js';
import { joinedNodeDir } from '../../src/testing/remote-node.js';
import { waitFor } from '../../src/testing/wait.js';
import { EngineClient } from '../engine/client.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The tests use the other indices; 7 is the bench's. */
export const BENCH_NETNS_INDEX = 7;
const NODE_PORT = 7443;
/** How much of the node's output an error shows. */
const TAIL_CHARS = 4000;
/** `sbx node` starting under tsx on a loaded 2-core machine, then the Manager's first dial. */
const ONLINE_TIMEOUT_MS = 60_000;
const EXIT_TIMEOUT_MS = 10_000;

export interface NetnsNode {
  name: string;
  engine: NetnsEngine;
  /** The namespace engine's Engine API, for sweeping the run's containers there. */
  engineClient: EngineClient;
  /** Stops `sbx node` (its boxes stay) and removes its data directory. Idempotent. */
  stop(): Promise<void>;
}

/** Kills the node processes still running when this process exits (a second Ctrl-C exits at once). */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * Brings up engine {@link BENCH_NETNS_INDEX}, joins a node named `name` to `manager` that will listen
 * at the namespace's address, starts `sbx node` in the namespace and resolves once the Manager has
 * it online. On failure everything it started is stopped again and the error carries the node's output.
 */
export async function startNetnsNode(manager: Manager, name: string, log: (line: string) => void): Promise<NetnsNode> {
  const engine = await startNetnsEngine(BENCH_NETNS_INDEX);
  if (engine.start.did.length > 0) log(`remote: engine ${engine.netns}: ${engine.start.did.join('; ')}`);
  const engineClient = new EngineClient({ socketPath: netnsLayout(BENCH_NETNS_INDEX).socket });
  const address = `${engine.address}:${NODE_PORT}`;
  const dataDir = await joinedNodeDir(manager, { name, address });
  const child = engine.spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'node', '--data-dir', dataDir, '--engine', engine.engineAddr], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  let output = '';
  const keep = (d: Buffer) => (output = (output + String(d)).slice(-TAIL_CHARS));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), EXIT_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    running.delete(child);
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      () => {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`sbx node exited (${child.exitCode ?? child.signalCode}) before it was online`);
        return manager.nodes().find((n) => n.name === name)?.state === 'online';
      },
      { what: `node ${name} at ${address} to be online`, timeoutMs: ONLINE_TIMEOUT_MS, intervalMs: 50 },
    );
  } catch (err) {
    await stop();
    engineClient.close();
    throw new Error(`${(err as Error).message}; sbx node said: ${output.trim() || '(nothing)'}`);
  }
  log(`remote: sbx node '${name}' (pid ${child.pid}) online at ${address}`);
  return { name, engine, engineClient, stop };
}

/** Stops the bench's namespace engine (its image cache stays for the next run). */
export async function stopBenchEngine(log: (line: string) => void): Promise<void> {
  const did = await stopNetnsEngine(BENCH_NETNS_INDEX);
  if (did.length > 0) log(`remote: engine sbx-t${BENCH_NETNS_INDEX}: ${did.join('; ')}`);
}
