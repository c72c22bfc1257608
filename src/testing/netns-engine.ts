/**
 * Real second and third machines for the tests of remote nodes (issue #26): each one a network
 * namespace `sbx-t<N>` linked to the host by a veth pair, with a Docker Engine of its own started
 * INSIDE it (`nsenter --net=… dockerd`). A dockerd in the host's namespace would rewrite the host's
 * iptables and take docker0 over under the main engine; in its own namespace it gets its own
 * docker0, bridges and iptables, and shares only the filesystem (so the agent's bind mount of
 * `.build/agent` works there as on the host) and the kernel.
 *
 * Layout of engine N (1..9):
 *   namespace sbx-tN; veth sbxtN-h 10.231.N.1/24 (host) ↔ sbxtN-n 10.231.N.2/24 (namespace, default route via .1)
 *   dockerd: socket /run/sbx-tN/docker.sock, exec root /run/sbx-tN/exec (so its own containerd: the
 *     host's dockerd runs the containerd it manages under /var/run/docker, not the system one at
 *     /run/containerd/containerd.sock, and each dockerd starts its own under its exec root; the
 *     containerd namespaces are set apart anyway, so no two engines could ever share one),
 *     data root /var/lib/sbx-test-nodes/N/docker (kept by stop: the image cache),
 *     docker0 10.(232+N).0.1/24 and user networks from 10.(232+N).0.0/16, which the host routes via
 *     10.231.N.2: the test process dials boxes there (their agents) as it does on its own engine.
 *
 * Everything is idempotent and copes with what a killed run leaves: a namespace or veth that exists
 * (or half of it), stale pid files, a dockerd still alive (reused when it answers in the right
 * namespace, stopped when it runs in an orphaned one). Needs root. Engines outlive the process that
 * started them (a later run reuses them); `stopNetnsEngine` or `scripts/netns-engines.sh down` ends them.
 */
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess, SpawnOptions } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, readlinkSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { open, readFile, unlink } from 'node:fs/promises';
import Docker from 'dockerode';
import { waitFor } from './wait.js';

/** What `startNetnsEngine` loads into an engine unless told otherwise (from the host's engine). */
export const NETNS_DEFAULT_IMAGES = ['sbx-base:latest', 'sbx-test:latest', 'sbx-agent:latest'] as const;
/** Where every engine's image cache lives: /var/lib/sbx-test-nodes/<N>/docker. */
export const NETNS_DATA_DIR = '/var/lib/sbx-test-nodes';
const SBIN_PATH = `${process.env['PATH'] ?? ''}:/usr/sbin:/sbin:/usr/local/sbin`;
const HOST_SOCKET = '/var/run/docker.sock';
/** A first start of dockerd on a fresh data root, on a loaded 2-core machine: only a hang takes this long. */
const START_TIMEOUT_MS = 120_000;
/** dockerd's own shutdown timeout is 15 s per container; beyond this it is stuck, and killed. */
const STOP_TIMEOUT_MS = 40_000;

export interface NetnsEngineOptions {
  /** Images loaded besides {@link NETNS_DEFAULT_IMAGES} (copied from the host's engine). */
  images?: string[];
  /** The host engine's socket the images come from (default /var/run/docker.sock). */
  hostSocket?: string;
  /** How long the engine may take to answer its first ping (default 120 s: a hang, not a slow start). */
  startTimeoutMs?: number;
}

/** What one `startNetnsEngine` did, for the tests' timings and the CLI's report. */
export interface NetnsEngineStart {
  /** Steps taken, in order; empty when everything was already in place (a no-op). */
  did: string[];
  /** Time until the engine answered, including the namespace and veth (0 when it already answered). */
  engineMs: number;
  /** Images copied from the host engine (none on a warm run) and how long that took. */
  loaded: string[];
  loadMs: number;
}

export interface NetnsEngine {
  index: number;
  /** The network namespace (`ip netns` name). */
  netns: string;
  /** The namespace's address, where a service in it listens for the host. */
  address: string;
  /** The host's address on the link, which the namespace reaches the host at. */
  hostAddress: string;
  /** The engine's address for `DockerRuntime`/`openRuntime`. */
  engineAddr: string;
  /** The subnet of the engine's bridges (docker0 and the box networks), routed from the host. */
  boxSubnet: string;
  /** dockerd's pid. */
  pid: number;
  start: NetnsEngineStart;
  /** Runs a process inside the namespace (`nsenter --net`); everything else (filesystem, user) is the host's. */
  spawn(cmd: string, args?: readonly string[], opts?: SpawnOptions): ChildProcess;
  /** Takes the host side of the veth down: the namespace is cut off from the host (a partition). */
  linkDown(): Promise<void>;
  /** Brings the link back, with the routes a down link lost. */
  linkUp(): Promise<void>;
  /** `stopNetnsEngine(index)`. */
  stop(): Promise<void>;
}

/** Names, addresses and paths of engine N. */
export function netnsLayout(index: number) {
  if (!Number.isInteger(index) || index < 1 || index > 9) throw new Error(`netns engine index must be 1..9, not ${index}`);
  const n = index;
  const runDir = `/run/sbx-t${n}`;
  return {
    netns: `sbx-t${n}`,
    netnsPath: `/run/netns/sbx-t${n}`,
    hostLink: `sbxt${n}-h`,
    nsLink: `sbxt${n}-n`,
    hostAddress: `10.231.${n}.1`,
    address: `10.231.${n}.2`,
    boxSubnet: `10.${232 + n}.0.0/16`,
    bip: `10.${232 + n}.0.1/24`,
    runDir,
    socket: `${runDir}/docker.sock`,
    pidFile: `${runDir}/docker.pid`,
    execRoot: `${runDir}/exec`,
    configFile: `${runDir}/daemon.json`,
    dataRoot: `${NETNS_DATA_DIR}/${n}/docker`,
    log: `/var/log/sbx-t${n}-dockerd.log`,
    lockFile: `/run/sbx-t${n}.lock`,
  };
}
type Layout = ReturnType<typeof netnsLayout>;

/** Runs a program (sbin on PATH) and returns its stdout; a failure names the command and its stderr. */
function run(cmd: string, args: string[], opts: { input?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { env: { ...process.env, PATH: SBIN_PATH }, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${String(stderr).trim() || err.message}`));
      else resolve(String(stdout));
    });
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}
const succeeds = (cmd: string, args: string[]): Promise<boolean> =>
  run(cmd, args).then(
    () => true,
    () => false,
  );

/** Starts in a process are serialized per engine; across processes the lock file does it. */
const inFlight = new Map<number, Promise<unknown>>();

function serialized<T>(index: number, fn: () => Promise<T>): Promise<T> {
  const prev = inFlight.get(index) ?? Promise.resolve();
  const next = prev.catch(() => undefined).then(() => withLockFile(netnsLayout(index).lockFile, fn));
  inFlight.set(index, next);
  return next.finally(() => {
    if (inFlight.get(index) === next) inFlight.delete(index);
  });
}

/** Holds an exclusive lock file (our pid in it); one whose process is gone is taken over. */
async function withLockFile<T>(path: string, fn: () => Promise<T>): Promise<T> {
  await waitFor(
    async () => {
      try {
        const fh = await open(path, 'wx');
        await fh.writeFile(String(process.pid));
        await fh.close();
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        const holder = Number((await readFile(path, 'utf8').catch(() => '')).trim());
        if (!holder || !alive(holder)) await unlink(path).catch(() => undefined);
        return false;
      }
    },
    { what: `the lock ${path}`, timeoutMs: START_TIMEOUT_MS * 3, intervalMs: 50 },
  );
  try {
    return await fn();
  } finally {
    await unlink(path).catch(() => undefined);
  }
}

function alive(pid: number): boolean {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return !/^State:\s*Z/m.test(status);
  } catch {
    return false;
  }
}

/** Pids of processes named `comm` whose command line names this engine's exec root: its dockerd, containerd, shims. */
function ourPids(l: Layout, comm: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (readFileSync(`/proc/${e}/comm`, 'utf8').trim() !== comm) continue;
      const args = readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0');
      if (args.some((a) => a === l.execRoot || a.startsWith(`${l.execRoot}/`))) pids.push(Number(e));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** The inode of a network namespace (its nsfs file), to tell which namespace a process is in. */
function netnsInode(path: string): number | undefined {
  try {
    return statSync(path).ino;
  } catch {
    return undefined;
  }
}

function processNetnsInode(pid: number): number | undefined {
  try {
    const m = /net:\[(\d+)\]/.exec(readlinkSync(`/proc/${pid}/ns/net`));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

function pingEngine(socket: string): Promise<boolean> {
  if (!existsSync(socket)) return Promise.resolve(false);
  return new Docker({ socketPath: socket, timeout: 2000 }).ping().then(
    () => true,
    () => false,
  );
}

/** Signals `pid` and waits for it to go; after `boundMs` (or at once for SIGKILL) it is killed. */
async function endProcess(pid: number, boundMs: number): Promise<'exited' | 'killed'> {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return 'exited';
  }
  try {
    await waitFor(() => !alive(pid), { what: `pid ${pid} to exit`, timeoutMs: boundMs, intervalMs: 50 });
    return 'exited';
  } catch {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // exited just now
    }
    await waitFor(() => !alive(pid), { what: `pid ${pid} to exit after SIGKILL`, intervalMs: 50 });
    return 'killed';
  }
}

/** The namespace, enterable; one whose file is no longer a namespace (its mount went) is made again. */
async function ensureNetns(l: Layout, did: string[]): Promise<void> {
  if (existsSync(l.netnsPath) && !(await succeeds('nsenter', [`--net=${l.netnsPath}`, 'true']))) {
    await run('ip', ['netns', 'delete', l.netns]).catch(() => rmSync(l.netnsPath, { force: true }));
    did.push(`removed broken netns ${l.netns}`);
  }
  if (!existsSync(l.netnsPath)) {
    await run('ip', ['netns', 'add', l.netns]);
    did.push(`created netns ${l.netns}`);
  }
}

/** The veth pair with its addresses and routes; half a pair (its peer in a namespace that is gone) is replaced. */
async function ensureLink(l: Layout, did: string[]): Promise<void> {
  let host = await succeeds('ip', ['link', 'show', l.hostLink]);
  let inNs = await succeeds('ip', ['-n', l.netns, 'link', 'show', l.nsLink]);
  if (host !== inNs || (host && !(await peerIsOurs(l)))) {
    if (host) await run('ip', ['link', 'delete', l.hostLink]);
    if (inNs) await run('ip', ['-n', l.netns, 'link', 'delete', l.nsLink]).catch(() => undefined);
    did.push(`removed half a veth pair (${l.hostLink}: ${host}, ${l.nsLink} in ${l.netns}: ${inNs})`);
    host = inNs = false;
  }
  if (!host) {
    await run('ip', ['link', 'add', l.hostLink, 'type', 'veth', 'peer', 'name', l.nsLink, 'netns', l.netns]);
    did.push(`created veth ${l.hostLink} ↔ ${l.nsLink}`);
  }
  await configureLink(l);
}

/** Whether the host side's peer is the namespace side (ifindex of the peer as the namespace sees it). */
async function peerIsOurs(l: Layout): Promise<boolean> {
  const peer = /@if(\d+):/.exec(await run('ip', ['-o', 'link', 'show', l.hostLink]))?.[1];
  const nsIndex = /^(\d+):/.exec(await run('ip', ['-n', l.netns, '-o', 'link', 'show', l.nsLink]))?.[1];
  return peer !== undefined && peer === nsIndex;
}

/** Addresses, links up and routes; every step idempotent (`replace`), so a link brought back up gets its routes again. */
async function configureLink(l: Layout): Promise<void> {
  const ns = ['-n', l.netns];
  await run('ip', ['addr', 'replace', `${l.hostAddress}/24`, 'dev', l.hostLink]);
  await run('ip', [...ns, 'addr', 'replace', `${l.address}/24`, 'dev', l.nsLink]);
  await run('ip', [...ns, 'link', 'set', 'lo', 'up']);
  await run('ip', [...ns, 'link', 'set', l.nsLink, 'up']);
  await run('ip', ['link', 'set', l.hostLink, 'up']);
  await run('ip', [...ns, 'route', 'replace', 'default', 'via', l.hostAddress, 'dev', l.nsLink]);
  // The host reaches the boxes' bridges as it reaches its own engine's: DockerRuntime dials their agents there.
  await run('ip', ['route', 'replace', l.boxSubnet, 'via', l.address, 'dev', l.hostLink]);
}

/** This engine's dockerd: the pid file's when it is ours, else one found by its exec root. */
function dockerdPid(l: Layout): number | undefined {
  const fromFile = Number(readFileOr(l.pidFile).trim());
  const ours = ourPids(l, 'dockerd');
  return ours.includes(fromFile) ? fromFile : ours[0];
}

function readFileOr(path: string, fallback = ''): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

function dockerdArgs(l: Layout, index: number): string[] {
  return [
    'dockerd',
    '--data-root',
    l.dataRoot,
    '--exec-root',
    l.execRoot,
    '--pidfile',
    l.pidFile,
    '-H',
    `unix://${l.socket}`,
    // Not /etc/docker/daemon.json: what the host's engine is configured with is not this one's.
    '--config-file',
    l.configFile,
    '--bip',
    l.bip,
    '--default-address-pool',
    `base=${l.boxSubnet},size=21`,
    '--cgroup-parent',
    l.netns,
    '--containerd-namespace',
    `sbx-t${index}`,
    '--containerd-plugins-namespace',
    `sbx-t${index}-plugins`,
  ];
}

/** Starts dockerd in the namespace unless ours answers there; returns its pid once it answers. */
async function ensureDaemon(l: Layout, index: number, timeoutMs: number, did: string[]): Promise<number> {
  let pid = dockerdPid(l);
  if (pid !== undefined && processNetnsInode(pid) !== netnsInode(l.netnsPath)) {
    // A dockerd of an earlier run whose namespace was deleted and made again: its bridges are in a namespace nobody reaches.
    const how = await endProcess(pid, STOP_TIMEOUT_MS);
    did.push(`stopped dockerd ${pid} of an orphaned namespace (${how})`);
    pid = undefined;
  }
  if (pid !== undefined && (await pingEngine(l.socket))) return pid;
  let exited: string | undefined;
  if (pid === undefined) {
    clearStale(l, did);
    mkdirSync(l.execRoot, { recursive: true });
    mkdirSync(l.dataRoot, { recursive: true });
    if (!existsSync(l.configFile)) writeFileSync(l.configFile, '{}\n');
    const args = dockerdArgs(l, index);
    writeFileSync(l.log, `\n=== ${new Date().toISOString()}: netns-engine starts nsenter --net=${l.netnsPath} ${args.join(' ')}\n`, { flag: 'a' });
    const logFd = openSync(l.log, 'a');
    // Its own session and no pipe of ours: it outlives this process, and holds no test runner's output open.
    const child = spawn('nsenter', [`--net=${l.netnsPath}`, ...args], {
      detached: true,
      stdio: ['ignore', logFd, logFd],
      env: { ...process.env, PATH: SBIN_PATH },
    });
    closeSync(logFd);
    child.once('exit', (code, signal) => (exited = `dockerd exited during start-up (${signal ?? `code ${code}`})`));
    child.unref();
    pid = child.pid!;
    did.push(`started dockerd ${pid}`);
  } else {
    did.push(`waited for dockerd ${pid} to answer`);
  }
  const started = pid;
  await waitFor(
    async () => {
      if (exited || !alive(started)) throw new Error(`${exited ?? `dockerd ${started} is gone`}; log ${l.log}:\n${tail(l.log)}`);
      return pingEngine(l.socket);
    },
    { what: `dockerd of ${l.netns} to answer on ${l.socket} (log ${l.log})`, timeoutMs, intervalMs: 50 },
  );
  return started;
}

function tail(path: string, lines = 25): string {
  return readFileOr(path).trimEnd().split('\n').slice(-lines).join('\n');
}

/** What a killed dockerd leaves and a new one trips over: its pid file, and a pid file of a containerd that is not ours. */
function clearStale(l: Layout, did: string[]): void {
  if (existsSync(l.pidFile)) {
    rmSync(l.pidFile, { force: true });
    did.push(`removed stale ${l.pidFile}`);
  }
  const cpidFile = `${l.execRoot}/containerd/containerd.pid`;
  const cpid = Number(readFileOr(cpidFile).trim());
  // dockerd reuses a live containerd of its pid file; a recycled pid would make it wait on a stranger.
  if (cpid && !ourPids(l, 'containerd').includes(cpid)) {
    rmSync(cpidFile, { force: true });
    did.push('removed stale containerd pid file');
  }
}

/**
 * The host (the test process) may open connections to the boxes' bridges through the veth. Where
 * Docker set FORWARD's policy to DROP (it does when it turned ip_forward on itself; a namespace
 * inherits the host's, and then the policy stays ACCEPT) only published ports would pass:
 * DOCKER-USER is the chain Docker leaves to its administrator. Replies and the boxes' own traffic
 * out are Docker's as usual.
 */
async function allowHostToBoxes(l: Layout, did: string[]): Promise<void> {
  const rule = ['DOCKER-USER', '-i', l.nsLink, '-s', `${l.hostAddress}/32`, '-j', 'ACCEPT'];
  const ipt = (...args: string[]) => run('nsenter', [`--net=${l.netnsPath}`, 'iptables', '-w', ...args]);
  if (
    await ipt('-C', ...rule).then(
      () => true,
      () => false,
    )
  )
    return;
  await ipt('-I', ...rule);
  did.push('allowed the host to the boxes (DOCKER-USER)');
}

async function imageId(docker: Docker, name: string): Promise<string | undefined> {
  return docker
    .getImage(name)
    .inspect()
    .then(
      (i) => i.Id,
      () => undefined,
    );
}

/** Copies the images whose id differs from the host engine's (one `docker save | docker load` for all): a warm run copies none. */
async function loadImages(l: Layout, images: string[], hostSocket: string): Promise<string[]> {
  const host = new Docker({ socketPath: hostSocket });
  const engine = new Docker({ socketPath: l.socket });
  const wanted: string[] = [];
  for (const img of images) {
    const want = await imageId(host, img);
    if (!want) throw new Error(`the host engine (${hostSocket}) has no ${img}: run scripts/images.sh first`);
    if ((await imageId(engine, img)) !== want) wanted.push(img);
  }
  if (wanted.length === 0) return [];
  await new Promise<void>((resolve, reject) => {
    const env = { ...process.env, DOCKER_HOST: undefined };
    const save = spawn('docker', ['-H', `unix://${hostSocket}`, 'save', ...wanted], { stdio: ['ignore', 'pipe', 'pipe'], env });
    const load = spawn('docker', ['-H', `unix://${l.socket}`, 'load', '-q'], { stdio: ['pipe', 'ignore', 'pipe'], env });
    save.stdout.pipe(load.stdin);
    let errors = '';
    save.stderr.on('data', (d: Buffer) => (errors += String(d)));
    load.stderr.on('data', (d: Buffer) => (errors += String(d)));
    let pending = 2;
    const done = (what: string) => (code: number | null) => {
      if (code !== 0) reject(new Error(`copying ${wanted.join(' ')} into ${l.netns}: docker ${what} exited ${code}: ${errors.trim()}`));
      else if (--pending === 0) resolve();
    };
    save.once('exit', done('save'));
    load.once('exit', done('load'));
    save.once('error', reject);
    load.once('error', reject);
  });
  return wanted;
}

/**
 * Brings up (or finds up) network namespace engine `index` and loads the images the tests need into it.
 * Concurrent calls for one index share the work; calls for different indexes run in parallel.
 *
 * @example
 * const node = await startNetnsEngine(1);
 * const rt = new DockerRuntime(node.engineAddr);
 */
export function startNetnsEngine(index: number, opts: NetnsEngineOptions = {}): Promise<NetnsEngine> {
  const l = netnsLayout(index);
  return serialized(index, async () => {
    const did: string[] = [];
    const t0 = performance.now();
    mkdirSync(l.runDir, { recursive: true });
    await ensureNetns(l, did);
    await ensureLink(l, did);
    const pid = await ensureDaemon(l, index, opts.startTimeoutMs ?? START_TIMEOUT_MS, did);
    await allowHostToBoxes(l, did);
    const engineMs = did.length ? Math.round(performance.now() - t0) : 0;
    const t1 = performance.now();
    const loaded = await loadImages(l, [...new Set([...NETNS_DEFAULT_IMAGES, ...(opts.images ?? [])])], opts.hostSocket ?? HOST_SOCKET);
    const loadMs = Math.round(performance.now() - t1);
    if (loaded.length) did.push(`loaded ${loaded.join(' ')} in ${loadMs} ms`);
    return handle(index, l, pid, { did, engineMs, loaded, loadMs });
  });
}

function handle(index: number, l: Layout, pid: number, start: NetnsEngineStart): NetnsEngine {
  return {
    index,
    netns: l.netns,
    address: l.address,
    hostAddress: l.hostAddress,
    engineAddr: `unix://${l.socket}`,
    boxSubnet: l.boxSubnet,
    pid,
    start,
    spawn: (cmd, args = [], opts = {}) =>
      spawn('nsenter', [`--net=${l.netnsPath}`, '--', cmd, ...args], { ...opts, env: { ...process.env, PATH: SBIN_PATH, ...opts.env } }),
    linkDown: async () => {
      await run('ip', ['link', 'set', l.hostLink, 'down']);
    },
    // A link taken down loses the routes through it (the host's to the boxes): configureLink puts them back.
    linkUp: () => configureLink(l),
    stop: () => stopNetnsEngine(index).then(() => undefined),
  };
}

/**
 * Stops engine `index` (SIGTERM to dockerd, SIGKILL after 40 s), kills what a killed dockerd left
 * (containerd, shims, the boxes' processes), unmounts its mounts, and removes the veth and the
 * namespace. Keeps the data root (the image cache). A no-op for an engine that is not there.
 *
 * @returns what it did, for the CLI's report.
 */
export function stopNetnsEngine(index: number): Promise<string[]> {
  const l = netnsLayout(index);
  return serialized(index, async () => {
    const did: string[] = [];
    const pid = dockerdPid(l);
    if (pid !== undefined) did.push(`dockerd ${pid} ${await endProcess(pid, STOP_TIMEOUT_MS)}`);
    // After a clean stop nothing is left; after a kill, containerd and the shims may be (shim-runc-v2's
    // command name is cut to 'containerd-shim', and its -address names our exec root).
    const left = [...ourPids(l, 'containerd-shim'), ...ourPids(l, 'containerd')];
    for (const p of left) await endProcess(p, 5_000);
    if (left.length) did.push(`ended ${left.length} leftover containerd/shim process(es)`);
    if (killCgroups(l.netns)) did.push('killed leftover box processes');
    const mounts = ourMounts(l);
    for (const m of mounts) await run('umount', [m]).catch(() => run('umount', ['-l', m]).catch(() => undefined));
    if (mounts.length) did.push(`unmounted ${mounts.length}`);
    if (await succeeds('ip', ['link', 'show', l.hostLink])) {
      await run('ip', ['link', 'delete', l.hostLink]);
      did.push(`deleted veth ${l.hostLink}`);
    }
    if (existsSync(l.netnsPath)) {
      await run('ip', ['netns', 'delete', l.netns]);
      did.push(`deleted netns ${l.netns}`);
    }
    rmSync(l.runDir, { recursive: true, force: true });
    return did;
  });
}

/** Kills the processes of the engine's cgroups (boxes whose shim was killed) and removes the cgroups; true when any were there. */
function killCgroups(parent: string): boolean {
  const dirs: string[] = [];
  for (const controller of readdirOr('/sys/fs/cgroup')) {
    const d = `/sys/fs/cgroup/${controller}/${parent}`;
    if (existsSync(d)) dirs.push(d);
  }
  if (existsSync(`/sys/fs/cgroup/${parent}`)) dirs.push(`/sys/fs/cgroup/${parent}`);
  let any = false;
  const walk = (d: string, visit: (d: string) => void) => {
    for (const e of readdirOr(d)) {
      try {
        if (statSync(`${d}/${e}`).isDirectory()) walk(`${d}/${e}`, visit);
      } catch {
        // gone meanwhile
      }
    }
    visit(d);
  };
  for (const d of dirs)
    walk(d, (dir) => {
      for (const p of readFileOr(`${dir}/cgroup.procs`).split('\n').filter(Boolean)) {
        any = true;
        try {
          process.kill(Number(p), 'SIGKILL');
        } catch {
          // gone
        }
      }
    });
  // A cgroup goes with rmdir only, once empty; a straggler keeps its own until the next stop.
  for (const d of dirs)
    walk(d, (dir) => {
      try {
        rmdirSync(dir);
      } catch {
        // not empty yet
      }
    });
  return any;
}

function readdirOr(d: string): string[] {
  try {
    return readdirSync(d);
  } catch {
    return [];
  }
}

/** Mount points under the engine's run dir and data root, deepest first (mountinfo escapes spaces as \040). */
function ourMounts(l: Layout): string[] {
  const inside = (m: string, root: string) => m === root || m.startsWith(`${root}/`);
  return readFileOr('/proc/self/mountinfo')
    .split('\n')
    .map((line) => (line.split(' ')[4] ?? '').replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((m) => inside(m, l.runDir) || inside(m, l.dataRoot))
    .sort((a, b) => b.length - a.length);
}

/** Indexes of the engines something of is on this machine (namespace, veth, run dir or dockerd): what `down all` stops. */
export async function listNetnsEngines(): Promise<number[]> {
  const found: number[] = [];
  const links = await run('ip', ['-o', 'link', 'show']).catch(() => '');
  for (let i = 1; i <= 9; i++) {
    const l = netnsLayout(i);
    if (existsSync(l.netnsPath) || existsSync(l.runDir) || links.includes(` ${l.hostLink}@`) || ourPids(l, 'dockerd').length) found.push(i);
  }
  return found;
}
