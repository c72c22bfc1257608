/**
 * The Runtime seam: everything sbx needs from a container engine, as plain data in and out
 * (so it could be served over the network) and streams as Node streams.
 * Implementations live one folder each below src/runtime; nothing above this layer knows
 * which engine it talks to.
 */
import type { Duplex, Readable, Writable } from 'node:stream';

export interface PortSpec {
  /** Port inside the container. */
  containerPort: number;
  /** Host port; 0 or absent picks a free one. */
  hostPort?: number;
  /** Host address to publish on; default 127.0.0.1 (never all interfaces unless asked). */
  hostIp?: string;
  protocol?: 'tcp' | 'udp';
}

export interface BindMount {
  hostPath: string;
  containerPath: string;
  readOnly?: boolean;
}

export interface SecuritySpec {
  noNewPrivileges?: boolean;
  capDrop?: string[];
  capAdd?: string[];
  readOnlyRootfs?: boolean;
  /** Container path -> mount options, e.g. `{ '/tmp': 'rw,size=64m' }`. */
  tmpfs?: Record<string, string>;
}

/**
 * One destination of an egress rule, as the runtime enforces it (src/sandbox/egress-policy.ts
 * parses the user's strings into these): an address block or a domain, optionally one port range
 * and one protocol.
 */
export interface EgressTarget {
  /**
   * A CIDR in canonical form (`198.18.0.0/15`, `198.18.0.1/32`, `2001:db8::/32`), or a domain:
   * lowercase ASCII (IDNA as punycode), no trailing dot; `*.example.com` matches every name
   * below example.com, not example.com itself.
   */
  host: string;
  /** Inclusive port range; absent: every port (and ICMP for address blocks). */
  ports?: [number, number];
  /** Absent: TCP and UDP (both only when `ports` is set). */
  protocol?: 'tcp' | 'udp';
}

/**
 * What a box may connect to, compiled for the runtime (docs/network.md). Order of the checks,
 * first match wins: `endpoints` accept; `deny` reject; `allow` blocks lying inside an always-denied
 * range accept; the always denied (link-local and metadata, the engine host's own addresses,
 * other boxes) reject; for `allowlist`, `allow` blocks inside a private range accept and the
 * private ranges reject; other `allow` blocks accept; addresses DNS gave for allowed names accept; then
 * `all`/`denylist` accept, `allowlist`/`none` reject. Names: a query for a name no rule allows
 * (allowlist, none) or a name denied without ports gets NXDOMAIN and is never forwarded.
 */
export interface EgressSpec {
  mode: 'all' | 'none' | 'allowlist' | 'denylist';
  allow: EgressTarget[];
  deny: EgressTarget[];
  /** sbx's own services the box must reach whatever the policy (heartbeats, the API): address blocks with a port. */
  endpoints: EgressTarget[];
}

export interface ContainerSpec {
  image: string;
  name?: string;
  cmd?: string[];
  entrypoint?: string[];
  env?: Record<string, string>;
  workDir?: string;
  user?: string;
  labels?: Record<string, string>;
  /** Memory limit in bytes; 0 or absent = none. */
  memory?: number;
  /** CPU limit in cores (1.5 = one and a half); 0 or absent = none. */
  cpus?: number;
  pidsLimit?: number;
  ports?: PortSpec[];
  binds?: BindMount[];
  /**
   * Engine network mode: 'none', 'bridge', 'host', or a network name. Absent: the runtime's
   * isolated network (Docker: `sbx-boxes`, where boxes reach neither each other nor the host's
   * services; docs/network.md). A named network is the caller's, with that network's isolation.
   */
  network?: string;
  security?: SecuritySpec;
  /** OCI runtime name, e.g. 'runsc' for gVisor. */
  ociRuntime?: string;
  /** /dev/shm size in bytes. */
  shmSize?: number;
  /**
   * Every TCP port of the container is reachable by `dialPort`, not only the published ones:
   * the runtime routes to the container's own address (Docker: its bridge network address, from
   * the engine's machine). Nothing more is published on the host.
   */
  dialAnyPort?: boolean;
  /**
   * The box's egress rules, in force before its command can send a packet (a runtime that
   * cannot enforce them refuses the create with not_available). Absent: `all` (the always
   * denied ranges still closed where the runtime enforces egress at all).
   */
  egress?: EgressSpec;
}

/**
 * The label that makes an image, or a container, an owner's. A runtime makes a container from an
 * image labelled with an owner only when the container's own labels name the same owner, however
 * the image is named (a tag, an id, an id prefix): a committed box (a snapshot, an archive) holds
 * that owner's files and env. `commit` gives the image its container's owner unless told another.
 */
export const IMAGE_OWNER_LABEL = 'sbx.owner';

export type ContainerStatus = 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

export interface PublishedPort {
  containerPort: number;
  protocol: 'tcp' | 'udp';
  hostIp: string;
  hostPort: number;
}

export interface ContainerInfo {
  id: string;
  name: string;
  image: string;
  status: ContainerStatus;
  running: boolean;
  exitCode: number | null;
  oomKilled: boolean;
  labels: Record<string, string>;
  ports: PublishedPort[];
  /** ISO 8601. */
  createdAt: string;
  /** ISO 8601, or null when never started. */
  startedAt: string | null;
  /**
   * What serves the box's exec and stream: its in-box agent, or the engine's own exec (the
   * fallback: the agent turned off, an image it cannot run in, a remote engine). Runtimes
   * without an agent may leave it out (meaning `engine`).
   */
  execPath?: 'agent' | 'engine';
}

/** What `list` returns per container: cheap to get for many containers at once. */
export interface ContainerSummary {
  id: string;
  name: string;
  image: string;
  status: ContainerStatus;
  running: boolean;
  labels: Record<string, string>;
  createdAt: string;
}

export interface ContainerListOptions {
  /** Every pair must match; a value of '' only asks that the label exists. */
  labels?: Record<string, string>;
  /** Include stopped containers (default true). */
  all?: boolean;
}

export interface ProcessInfo {
  pid: string;
  user: string;
  command: string;
}

export interface ContainerStats {
  /**
   * CPU use in percent of one core (200: two cores busy) since the previous read (Docker: one within a
   * minute before; else over the engine's own two samples, 1 s apart);
   * null where the runtime does not measure it (Kubernetes: no metrics-server is assumed).
   */
  cpuPercent: number | null;
  /** Memory in use, page cache that can be dropped (inactive files) left out, as `docker stats` counts it. */
  memoryBytes: number;
  /** The memory the box is held to (its cgroup's limit); null where the runtime cannot read one. */
  memoryLimitBytes: number | null;
  pids: number;
  /** Page cache of the box's files (cgroup v1 `cache`, v2 `file`); absent where the engine does not say. */
  memoryCacheBytes?: number;
  /** Bytes the box wrote over its image (Docker: the container's SizeRw); absent where the engine does not say. */
  diskUsedBytes?: number;
}

export interface ExecOptions {
  workDir?: string;
  env?: Record<string, string>;
  user?: string;
  /** Kill the process (and what it started) inside the box after this long. */
  timeoutMs?: number;
  /** For `exec`: bytes written to the process's stdin, then stdin is closed. */
  stdin?: string | Uint8Array;
  /** For `exec`: keep at most this many bytes of stdout and of stderr each (default 64 MiB, at most MAX_OUTPUT_BYTES). */
  maxOutputBytes?: number;
  /**
   * For `exec`: where the memory of the kept output comes from (sbx serve's buffered-output
   * budget). With it the output is kept as bytes, taken from the budget as it arrives; when the
   * budget grants nothing more the rest is dropped (`truncated`); `stdout` and `stderr` decode
   * on first read. The caller gives the memory back once it let go of the result.
   */
  outputBudget?: OutputBudget;
  /** Abort = kill the process inside the box. */
  signal?: AbortSignal;
}

/** Memory for a buffered exec's output, handed out in pieces. */
export interface OutputBudget {
  /** Takes up to `bytes`; returns how many it got (0: none left). */
  take(bytes: number): number;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  /** True when stdout or stderr went past maxOutputBytes and was cut. */
  truncated: boolean;
  /** True when timeoutMs passed and the process was killed; exitCode is then 137. */
  timedOut: boolean;
  durationMs: number;
}

export interface ExecStreamOptions {
  workDir?: string;
  env?: Record<string, string>;
  user?: string;
  /** Kill the process inside the box after this long; wait() then resolves with 137. */
  timeoutMs?: number;
  /** Allocate a terminal: stderr is merged into stdout, `resize` works, and `stdin.end()` sends ^D. */
  tty?: boolean;
  /** Initial terminal size with tty. */
  size?: { cols: number; rows: number };
  signal?: AbortSignal;
}

export interface ExecStream {
  stdout: Readable;
  stderr: Readable;
  /** `end()` is a real half-close: the process sees EOF, its remaining output still arrives. */
  stdin: Writable;
  /** Resolves with the exit code as soon as the process has exited and its output is drained. */
  wait(): Promise<number>;
  /** Kills the process inside the box (and what it started), then closes the connection. */
  cancel(): Promise<void>;
  resize(size: { cols: number; rows: number }): Promise<void>;
  /** The process's pid inside the box, when the runtime knows it (the in-box agent does; the engine's exec does not). */
  readonly pid?: number;
  /**
   * Sends one signal to the process itself (not to what it started), when the runtime can (the
   * in-box agent). To end the process and everything it started, `cancel()`.
   */
  signal?(name: ProcessSignal): Promise<void>;
}

/** The signals `ExecStream.signal` sends, by name. */
export const PROCESS_SIGNALS = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGUSR1: 10, SIGUSR2: 12, SIGTERM: 15 } as const;
export type ProcessSignal = keyof typeof PROCESS_SIGNALS;

/**
 * What `Runtime.logs` (and `Box.logs`) read of a container's main process output: everything
 * the engine kept, or the last `tail` lines, or what was written since a time; with `follow`,
 * also what it writes from now on, until the process ends (or the container is removed, or
 * `signal` aborts).
 */
export interface LogOptions {
  /** Keep reading what the process writes until it ends (then the iteration ends). */
  follow?: boolean;
  /** Only the last this many lines (0: none of the past, with `follow` only what comes). */
  tail?: number;
  /** Only what was written at or after this time (ISO 8601). Not with `sinceMs`. */
  since?: string;
  /** Only what was written in the last this many milliseconds. Not with `since`. */
  sinceMs?: number;
  /** Abort: stop reading (the iteration ends). */
  signal?: AbortSignal;
}

/** A piece of a container's output as the engine logged it: one line, or a part of a long one. */
export interface LogChunk {
  /**
   * Which output it was written to. A runtime whose log does not tell them apart
   * (`capabilities.logStreams` false: Kubernetes) says `stdout` for both.
   */
  stream: 'stdout' | 'stderr';
  /** The text (UTF-8), its line end included. */
  data: string;
  /** When the engine took it, ISO 8601 as the engine wrote it (up to nanoseconds). */
  time: string;
}

export interface RegistryAuth {
  username: string;
  password: string;
  /** Registry host, e.g. 127.0.0.1:5000; default is taken from the image reference. */
  server?: string;
}

export interface PullProgress {
  /** Layer id, absent for whole-image lines. */
  id?: string;
  status: string;
  current?: number;
  total?: number;
}

export interface ImageInfo {
  id: string;
  tags: string[];
  sizeBytes: number;
  createdAt: string;
}

export interface RuntimeVersion {
  engine: string;
  version: string;
  apiVersion: string;
  os: string;
  arch: string;
}

export interface Images {
  exists(ref: string): Promise<boolean>;
  /** Progress events; throws SbxError when the engine reports an error. */
  pull(ref: string, opts?: { auth?: RegistryAuth; signal?: AbortSignal }): AsyncIterable<PullProgress>;
  list(): Promise<ImageInfo[]>;
  remove(ref: string, opts?: { force?: boolean }): Promise<void>;
  /** Builds from a tar stream of a context holding a Dockerfile; yields build output lines. */
  build(context: Readable, tag: string, opts?: { labels?: Record<string, string> }): AsyncIterable<string>;
}

/** TLS material for a runtime reached over the network (PEM text or bytes). */
export interface TlsOptions {
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
}

/** How to open a runtime, the same for every engine; each engine applies what concerns it. */
export interface RuntimeOptions {
  /** Client TLS for network addresses; engines may fall back to their own defaults (DOCKER_CERT_PATH). */
  tls?: TlsOptions;
  /** Engine calls in flight at once on this runtime; small machines choke past about 10. */
  maxConnections?: number;
  /**
   * Docker and Kubernetes: how long a read (inspect, list, info, stats, logs: an HTTP GET) waits for
   * the engine's or API server's answer before it fails `runtime_unavailable` (default 60 s): a stuck
   * engine gives errors, not calls that never return.
   */
  answerTimeoutMs?: number;
  /**
   * Inject the in-box agent into new boxes (default true): exec, stream and kills through it,
   * the engine's exec as the fallback. Only engines on this machine (a unix socket) can have it.
   */
  agent?: boolean;
  /** Where the agent binaries are (sbx-agent-linux-<arch>); default `$SBX_AGENT_DIR`, else `.build/agent` of the package. */
  agentDir?: string;
  /** Kubernetes: the image the agent binary comes from (an image volume, else an init container copies it); absent: no agent there. */
  agentImage?: string;
  /** Kubernetes: how the agent binary gets into a pod (docs/kubernetes.md "The in-box agent"); default `auto`: a probe decides. */
  agentDelivery?: AgentDeliveryChoice;
  /** Kubernetes: how long `start` waits for the pod to be ready (default 120 s: a first pull of a large image). */
  readyTimeoutMs?: number;
  /** Kubernetes: the StorageClass of workspace volumes; absent: the cluster's default. */
  storageClass?: string;
  /**
   * Docker on this machine: close the host's own services to boxes with firewall rules (iptables;
   * needs root or CAP_NET_ADMIN, else creates fail `not_available`). Default true unless
   * `SBX_HOST_FIREWALL=off`; false leaves them reachable (boxes stay closed to each other).
   */
  hostFirewall?: boolean;
  /**
   * Docker and Kubernetes: the upstream resolvers (`ip:port`, `ip` meaning port 53; IPv6 as
   * `[ip]:port`) the egress enforcer forwards boxes' allowed DNS names to. Default
   * `$SBX_EGRESS_DNS` (a comma list); empty: the resolvers of the engine machine's (Docker) or the
   * pod's (Kubernetes) /etc/resolv.conf.
   */
  egressDns?: string[];
  /**
   * Docker and Kubernetes: the egress enforcer's image (default `sbx-egress:latest`, built by
   * scripts/images.sh; scripts/kube.sh imports it into the test cluster). Kubernetes: `''` means no
   * sidecar, `capabilities.egress` false and a spec with egress rules refused.
   */
  egressImage?: string;
  /**
   * Kubernetes: the cluster's pod and service networks (CIDRs), denied to every box unless a rule
   * names them, so boxes do not reach each other under `all` or a denylist. Default
   * `$SBX_EGRESS_DENY_NETWORKS`, else none (the runtime's Role cannot read the pod network).
   */
  egressDenyNetworks?: string[];
  /** Remote nodes (`sbx://` addresses): the Manager's node hub, which holds their connections. */
  nodes?: NodeRuntimes;
}

/** What opens the runtime of an `sbx://` address (the Manager's NodeHub). */
export interface NodeRuntimes {
  runtimeFor(addr: string): Runtime;
}

/** What `Runtime.createWorkspaceVolume` takes. */
export interface WorkspaceVolumeOptions {
  /** Requested size in bytes (the runtime's default when absent). */
  sizeBytes?: number;
  labels?: Record<string, string>;
  /** Fail with `conflict` when the volume exists (one being deleted is waited for) instead of using it. */
  exclusive?: boolean;
}

/** What `Runtime.startWorkspaceHelper` takes. */
export interface WorkspaceHelperOptions {
  labels: Record<string, string>;
  /** The user file operations run as (what they create belongs to it). */
  uid: number;
  gid: number;
}

/** A running workspace helper: its container id, the file tool's path in it, the workspace's path in it. */
export interface WorkspaceHelper {
  id: string;
  tool: string;
  root: string;
}

/** A change of one container's state, as the engine reports it. */
export interface ContainerEvent {
  /** Container id. */
  id: string;
  /** `created`, `started`, `stopped` (the process ended: exit, kill, OOM, engine shutdown) or `removed`. */
  action: 'created' | 'started' | 'stopped' | 'removed';
  labels: Record<string, string>;
  /** ISO 8601. */
  at: string;
}

/** What the machine under a runtime offers a box at most. */
export interface RuntimeResources {
  cpus: number;
  memoryBytes: number;
  /** The user namespace the engine runs every box in (Docker's userns-remap); absent: a box's ids are the machine's. */
  userns?: UserNamespaceMap;
}

/**
 * How a box's user and group ids map to the engine machine's: id n in the box is `hostUid + n`
 * (`hostGid + n`) there, for n below `size`; ids above it have no host id (they read as nobody).
 *
 * @example
 * const remap: UserNamespaceMap = { hostUid: 100000, hostGid: 100000, size: 65536 }; // box uid 1000 = host uid 101000
 */
export interface UserNamespaceMap {
  hostUid: number;
  hostGid: number;
  size: number;
}

/** What a runtime can do, so the layers above never ask which engine it is. */
export interface RuntimeCapabilities {
  /** Host directories of the machine sbx runs on can be mounted into boxes (workspaces). */
  hostMounts: boolean;
  /**
   * A stopped box can be started again, its filesystem kept (absent means true). Kubernetes:
   * false, `stop` deletes the pod (a pod never runs again once its container ended).
   */
  stopStart?: boolean;
  /** `ports` are published on a host address and listed by `inspect` (absent means true). Kubernetes: false, `dialPort` reaches them. */
  publishedPorts?: boolean;
  /**
   * `pidsLimit` is enforced per box (absent means true). Kubernetes: false, it is the kubelet's
   * `podPidsLimit`, one for every pod of a node. gVisor boxes (Docker, `capabilitiesFor`): false,
   * it bounds the sandbox's host tasks (its own and about two per box process; going over ends the
   * box), not the box's processes one by one.
   */
  pidsLimit?: boolean;
  /** An exec may run as another user than the box's (absent means true). Kubernetes: false until the in-box agent serves exec there. */
  execUser?: boolean;
  /** `logs` tells stdout from stderr (absent means true). Kubernetes: false, a pod's log holds both as one. */
  logStreams?: boolean;
  /**
   * `pause` freezes every process of a box in place (the cgroup freezer: memory kept, no CPU) and
   * `unpause` thaws them (absent means true). Kubernetes: false, the API has no freezer.
   */
  pause?: boolean;
  /** `commit` saves a container's filesystem as an image (absent means true). Kubernetes: false. */
  commit?: boolean;
  /**
   * `stats` measures CPU use (absent means true). Kubernetes: false, its `cpuPercent` is null
   * (CPU rates need a metrics-server, which is not assumed); memory and pids it reads all the same.
   */
  cpuStats?: boolean;
  /** `ContainerSpec.egress` and `setEgress` are enforced (absent means false). */
  egress?: boolean;
  /**
   * `checkpoint` and `restoreCheckpoint` exist (absent means false): a box's memory and processes
   * can be written to disk and its container ended, then restored. Whether one container can is
   * its OCI runtime's matter (gVisor's runsc can, runc cannot here): `checkpoint` refuses the
   * others with not_available.
   */
  checkpoint?: boolean;
}

/** One heartbeat a box sent (agent/heartbeat.go), as a node relays it. */
export interface BoxHeartbeat {
  boxId: string;
  /** The box token it presented (Bearer), for the Manager to check. */
  token: string;
  active: boolean;
  processCount: number;
}

/** A TCP service of the engine's machine that boxes may reach: one of its IPv4 addresses and a port. */
export interface HostEndpoint {
  address: string;
  port: number;
}

export interface Runtime {
  /** The address this runtime was opened with, for messages. */
  readonly address: string;
  readonly images: Images;
  readonly capabilities: RuntimeCapabilities;
  /**
   * What boxes of one OCI runtime (`ContainerSpec.ociRuntime`; undefined: the engine's default)
   * get, where that differs from `capabilities` (Docker: a gVisor box). Absent: `capabilities`
   * for every box; callers go through capabilitiesOf.
   */
  capabilitiesFor?(ociRuntime: string | undefined): RuntimeCapabilities;
  ping(): Promise<void>;
  version(): Promise<RuntimeVersion>;
  create(spec: ContainerSpec): Promise<string>;
  start(id: string): Promise<void>;
  /** SIGTERM, then SIGKILL after timeoutMs. Stopping a stopped container is not an error. */
  stop(id: string, opts?: { timeoutMs?: number }): Promise<void>;
  /**
   * Freezes every process of a running container (the engine's pause: the cgroup freezer);
   * memory stays, CPU use stops. Pausing a paused container is not an error; a container that
   * is not running is `conflict`. A runtime without a freezer (`capabilities.pause` false)
   * throws `not_available`. Resolves once the container is frozen, whatever the engine's own
   * bookkeeping said meanwhile (docker/freezer.ts); Docker's `inspect` may still say running for
   * a moment after (its flag lags), which is why a Box keeps its own word on paused or running.
   */
  pause(id: string): Promise<void>;
  /** Thaws a paused container, as pause resolves once it runs. Unpausing a container that is not paused is not an error. */
  unpause(id: string): Promise<void>;
  /**
   * Saves the container's filesystem (its changes over its image; mounts and tmpfs are not part of
   * it) as the image `ref` with `labels`. The image's settings (entrypoint, cmd, user, workdir) are
   * those of the image the container was made from, so a box made from it starts as one from that
   * image would; the container's env stays in it, with sbx's own variables (`SBX_*`, the agent's
   * token) blanked, and of its labels only its owner's (IMAGE_OWNER_LABEL) and `labels`. A running
   * container is paused for the copy and left running. A runtime that cannot (`capabilities.commit`
   * false): not_available.
   */
  commit(id: string, ref: string, opts?: { labels?: Record<string, string> }): Promise<void>;
  /** With force a running container is killed first. A missing container is not_found. */
  remove(id: string, opts?: { force?: boolean }): Promise<void>;
  inspect(id: string): Promise<ContainerInfo>;
  list(opts?: ContainerListOptions): Promise<ContainerSummary[]>;
  processes(id: string): Promise<ProcessInfo[]>;
  /**
   * Container state changes matching the labels, from now on, until `signal` aborts (then the
   * iteration ends) or the engine goes away (then it throws runtime_unavailable).
   */
  events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncIterable<ContainerEvent>;
  /** The cores and memory of the machine the engine runs on. */
  resources(): Promise<RuntimeResources>;
  stats(id: string): Promise<ContainerStats>;
  exec(id: string, cmd: string[], opts?: ExecOptions): Promise<ExecResult>;
  execStream(id: string, cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream>;
  /**
   * The output of the container's main process (its command; the in-box agent's own rare
   * diagnostics are lines starting `sbx-agent: ` on stderr), as the engine keeps it. Resolves once
   * the engine answered (an unknown id is not_found, bad options invalid_argument); the iteration
   * then yields chunks in order and ends when the log does: at once without `follow`, else when
   * the process ends, the container is removed or `signal` aborts. Leaving the loop early closes
   * the engine's stream.
   */
  logs(id: string, opts?: LogOptions): Promise<AsyncIterable<LogChunk>>;
  /**
   * Hands variables to the in-box agent of a running container: every later exec gets them under
   * its own and the agent's heartbeat reads its identity from them (a claimed warm spare). False
   * when the container has no agent that took them; the caller then passes them with each exec.
   */
  setBoxEnv(id: string, env: Record<string, string>): Promise<boolean>;
  /**
   * A TCP connection to a port a service of the box listens on: the runtime does the routing
   * (Docker: the port it published on 127.0.0.1; Kubernetes: a port-forward). Resolves once
   * connected. Errors: `not_available` with `details.reason` `port_not_exposed` (the box was not
   * created with that port) or `port_not_listening` (refused), `not_found` for an unknown box.
   * A connect says nothing of the service being ready (docker-proxy accepts before the app
   * listens): readiness is the caller's HTTP request or WebSocket handshake.
   */
  dialPort(id: string, containerPort: number, opts?: { signal?: AbortSignal }): Promise<Duplex>;
  /**
   * The in-box path of sbx's file tool for a container (`<path> fs <op> …`, run through
   * `execStream` as any user, so the kernel applies that user's permissions), made available
   * first when the runtime has to (copied in); null when this box cannot have it. Runtimes
   * without it leave it out: the box filesystem is then not_available.
   */
  boxTool?(id: string): Promise<string | null>;
  /**
   * Workspaces in the cluster (Kubernetes), for runtimes that cannot mount this machine's
   * directories: the storage a bind's `hostPath` names (one volume per workspace directory). All
   * three or none; absent on runtimes with `hostMounts`.
   */
  createWorkspaceVolume?(hostPath: string, opts?: WorkspaceVolumeOptions): Promise<string>;
  /** Deletes the storage `hostPath` names, and its data; a missing one is not_found. */
  removeWorkspaceVolume?(hostPath: string): Promise<void>;
  /**
   * Starts a pod holding nothing but sbx's file tool and the workspace's storage, for the
   * workspace's file I/O (`execStream` with `tool fs …`, paths under `root`); removed with `remove`.
   */
  startWorkspaceHelper?(hostPath: string, opts: WorkspaceHelperOptions): Promise<WorkspaceHelper>;
  /**
   * The workspace volumes this runtime holds (those `createWorkspaceVolume` made and not yet
   * removed), each with the `hostPath` that names it and the labels it was created with. Optional,
   * beside the three workspace volume methods: a runtime over several machines (NodeSet) asks it
   * to learn which machine holds a workspace (a box mounting it must run there).
   */
  listVolumes?(): Promise<{ hostPath: string; labels: Record<string, string> }[]>;
  /**
   * Declares the TCP endpoints of the engine's machine boxes may reach: sbx's own (the API that
   * takes heartbeats, the gRPC heartbeat), each an address of that machine and a port, replacing
   * this runtime's earlier declaration. Every other service of the host is closed to boxes, the
   * same port at another address too. Runtimes that do not close the host (or cannot reach its
   * firewall) leave it out. Docker: allowed for every box of the isolated network; IPv4 only.
   */
  allowHostEndpoints?(endpoints: HostEndpoint[]): Promise<void>;
  /**
   * The OCI runtimes the engine offers (`runc`, `runsc`, …), for a node's facts. Runtimes that
   * cannot tell leave it out.
   */
  ociRuntimes?(): Promise<string[]>;
  /**
   * The address of the engine's machine that boxes on the runtime's isolated network reach it at
   * (Docker: the box network's gateway), made ready first; undefined when there is none. What a
   * node listens on for its boxes' heartbeats (src/node/heartbeat-relay.ts).
   */
  boxGateway?(): Promise<string | undefined>;
  /**
   * The heartbeats of the boxes behind this runtime that cannot reach the Manager themselves
   * (RemoteRuntime: the node relays what its boxes post to it), from now on until `signal`
   * aborts (then the iteration ends) or the connection is lost (then it throws
   * runtime_unavailable). The token is the box's own, unchecked: the Manager checks it as it
   * does a heartbeat the box posts itself.
   */
  heartbeats?(signal: AbortSignal): AsyncIterable<BoxHeartbeat>;
  /**
   * Replaces a running box's egress rules: new connections follow them at once, and packets of
   * open connections to what is now denied are refused (TCP gets a reset). Present exactly when
   * `capabilities.egress` is true.
   */
  setEgress?(id: string, egress: EgressSpec): Promise<void>;
  /** The egress rules in force for a box (the last `setEgress`, else its spec's); undefined: none recorded. */
  getEgress?(id: string): Promise<EgressSpec | undefined>;
  /**
   * Writes a running container's whole state (memory, processes, open files) to its checkpoint
   * `name` and ends the container: it reads `exited`, holds no process and no memory on the host,
   * and keeps its filesystem. A paused container is thawed first (its processes must run to be saved). A container whose OCI runtime cannot (runc), or an engine whose
   * checkpoint API is off: not_available (`details.reason` `checkpoint_unsupported`). Called only
   * when `capabilities.checkpoint` is true (a remote runtime learns it from its node), with the
   * three below.
   */
  checkpoint?(id: string, name: string): Promise<void>;
  /**
   * Starts a container from its checkpoint `name`: its processes go on where they were, its
   * network is set up as at any start (address, egress rules) and its agent answers before this
   * resolves. The checkpoint stays until `removeCheckpoint`.
   */
  restoreCheckpoint?(id: string, name: string): Promise<void>;
  /** The names of a container's checkpoints (a crash mid-way is settled by what is there). */
  checkpoints?(id: string): Promise<string[]>;
  /** Deletes a container's checkpoint (its files); a missing one is not an error. */
  removeCheckpoint?(id: string, name: string): Promise<void>;
  /** Releases connections (and what `allowHostEndpoints` declared); containers are not touched. */
  close(): Promise<void>;
}

/** Exit code reported for a process sbx killed (timeout, cancel): 128 + SIGKILL. */
export const KILLED_EXIT_CODE = 137;

/** How a Kubernetes pool's pods get the agent binary: `auto` probes the cluster once for image volumes. */
export const AGENT_DELIVERY_CHOICES = ['auto', 'image-volume', 'init-container'] as const;
export type AgentDeliveryChoice = (typeof AGENT_DELIVERY_CHOICES)[number];

/** A runtime's checkpoint calls, the four together (what `capabilities.checkpoint` offers). */
export type CheckpointCalls = Required<Pick<Runtime, 'checkpoint' | 'restoreCheckpoint' | 'checkpoints' | 'removeCheckpoint'>>;

/** The runtime's checkpoint calls when it offers them (`capabilities.checkpoint` and all four present), else undefined. */
export function checkpointCallsOf(rt: Runtime): CheckpointCalls | undefined {
  if (rt.capabilities.checkpoint !== true || !rt.checkpoint || !rt.restoreCheckpoint || !rt.checkpoints || !rt.removeCheckpoint) return undefined;
  return rt as CheckpointCalls;
}

/** What a box of `ociRuntime` gets on a runtime (its capabilitiesFor, else its capabilities). */
export function capabilitiesOf(rt: Pick<Runtime, 'capabilities' | 'capabilitiesFor'>, ociRuntime: string | undefined): RuntimeCapabilities {
  return rt.capabilitiesFor?.(ociRuntime) ?? rt.capabilities;
}
