/**
 * Injection of the in-box agent into Docker boxes (docs/agent.md): at create, the agent binary
 * for the image's architecture is bind-mounted read-only at /.sbx/sbx-agent and made the
 * entrypoint (PID 1) with the box's command as its child, running as the box's user; a per-box
 * host directory under the runtime's state directory is mounted at /run/sbx-agent, where the
 * agent serves its socket. Later, exec finds the socket from the container's mounts, so a
 * restarted runtime reconnects to boxes created before.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import type { ContainerSpec } from '../types.js';

/** Where the agent's binary and socket directory are mounted inside every box. */
export const AGENT_BIN = '/.sbx/sbx-agent';
export const AGENT_DIR = '/run/sbx-agent';
export const AGENT_SOCKET = 'agent.sock';
/** Labels the runtime puts on a box with the agent: the protocol version and the box's user. */
export const AGENT_LABEL = 'sbx.agent';
export const AGENT_USER_LABEL = 'sbx.agent.user';
/** Capabilities the agent needs as PID 1 (switch users, kill any process of the box). */
const AGENT_CAPS = ['KILL', 'SETUID', 'SETGID'];
/** sun_path is 108 bytes with its NUL. */
const MAX_SOCKET_PATH = 107;

/** The image fields the injection needs: what the agent must run, as whom, on which CPU. */
export interface ImageConfig {
  id: string;
  architecture: string;
  entrypoint: string[];
  cmd: string[];
  user: string;
  envHasHome: boolean;
}

export function imageConfigOf(info: Docker.ImageInspectInfo): ImageConfig {
  const cfg = info.Config ?? ({} as Docker.ImageInspectInfo['Config']);
  const list = (v: unknown): string[] => (Array.isArray(v) ? (v as string[]) : typeof v === 'string' && v ? [v] : []);
  return {
    id: info.Id,
    architecture: info.Architecture ?? '',
    entrypoint: list(cfg?.Entrypoint),
    cmd: list(cfg?.Cmd),
    user: cfg?.User ?? '',
    envHasHome: (cfg?.Env ?? []).some((e) => e.startsWith('HOME=')),
  };
}

/**
 * The directory holding sbx-agent-linux-<arch>: `$SBX_AGENT_DIR`, else `.build/agent` of this
 * checkout or package (scripts/agent.sh builds it there).
 */
export function defaultAgentDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env['SBX_AGENT_DIR']) return resolve(env['SBX_AGENT_DIR']);
  // src/runtime/docker (tsx) and dist/runtime/docker (built) both sit three levels below the root.
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '.build', 'agent');
}

/** The Manager's data directory's default, with the agent's per-box directories below it. */
export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env['SBX_DATA_DIR'] ?? join(homedir(), '.sbx'), 'agent');
}

const ARCHES: Record<string, string> = { amd64: 'amd64', x86_64: 'amd64', arm64: 'arm64', aarch64: 'arm64' };

/** The agent binary for an image's architecture, or undefined (then the box has no agent). */
export function agentBinaryFor(agentDir: string, architecture: string): string | undefined {
  const arch = ARCHES[architecture || 'amd64'];
  if (!arch) return undefined;
  const path = join(agentDir, `sbx-agent-linux-${arch}`);
  return existsSync(path) ? path : undefined;
}

export interface Injection {
  spec: ContainerSpec;
  /** The per-box host directory (created; to remove if the create fails). */
  dir: string;
  socketPath: string;
  user: string;
}

/**
 * The spec with the agent injected, or a reason why the box gets none (no binary for the
 * image's architecture, a state directory too deep for a unix socket path).
 */
export async function injectAgent(spec: ContainerSpec, image: ImageConfig, agentDir: string, stateDir: string): Promise<Injection | { skip: string }> {
  const binary = agentBinaryFor(agentDir, image.architecture);
  if (!binary) return { skip: `no agent binary for architecture '${image.architecture}' in ${agentDir} (scripts/agent.sh builds them)` };
  // The agent switches users and kills any process of the box: a box whose capabilities lack
  // KILL, SETUID or SETGID (the strict profile drops all) keeps the engine's exec rather than
  // gaining them (a uid-0 process would keep them in its bounding set).
  const sec = spec.security ?? {};
  const dropsAll = sec.capDrop?.includes('ALL') ?? false;
  const missing = AGENT_CAPS.filter((c) => (dropsAll || sec.capDrop?.includes(c)) && !sec.capAdd?.includes(c));
  if (missing.length) return { skip: `the box's capabilities lack ${missing.join(', ')}, which the agent needs` };
  const key = randomBytes(8).toString('hex');
  const dir = join(stateDir, key);
  const socketPath = join(dir, AGENT_SOCKET);
  if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH) return { skip: `socket path ${socketPath} is longer than a unix socket allows` };
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  // 0700 and the host's: no process of the box (root included, without the host's uid) gets in;
  // the agent is checked by SO_PEERCRED on top (docs/agent.md).
  await mkdir(dir, { mode: 0o700 });

  const user = spec.user ?? image.user;
  const entrypoint = spec.entrypoint ?? image.entrypoint;
  // As the engine merges them: an entrypoint given at create drops the image's CMD.
  const cmd = spec.cmd ?? (spec.entrypoint ? [] : image.cmd);
  const args = [
    AGENT_BIN,
    'init',
    ...(user ? ['--user', user] : []),
    ...(spec.env?.['HOME'] !== undefined || image.envHasHome ? [] : ['--home']),
    '--',
    ...entrypoint,
    ...cmd,
  ];
  const { cmd: _cmd, ...rest } = spec;
  return {
    spec: {
      ...rest,
      entrypoint: args,
      user: '0:0',
      labels: { ...(spec.labels ?? {}), [AGENT_LABEL]: '1', [AGENT_USER_LABEL]: user },
      binds: [...(spec.binds ?? []), { hostPath: binary, containerPath: AGENT_BIN, readOnly: true }, { hostPath: dir, containerPath: AGENT_DIR }],
    },
    dir,
    socketPath,
    user,
  };
}

/** What the runtime knows about one box's agent. */
export interface AgentBox {
  /** Host path of the agent's socket; undefined: the box has no agent. */
  socketPath: string | undefined;
  dir: string | undefined;
  /** The box's user (the container runs as root with the agent: the engine path must say it). */
  user: string | undefined;
  /** Set when the agent refused this host (protocol version): the engine path serves the box. */
  refused?: string;
  /** The container start (StartedAt) at which the agent last answered. */
  verifiedStart?: string;
}

/** The agent of a container, from its inspect: the socket directory is the mount at AGENT_DIR. */
export function agentBoxOf(c: Docker.ContainerInspectInfo): AgentBox {
  const labels = c.Config?.Labels ?? {};
  if (labels[AGENT_LABEL] === undefined) return { socketPath: undefined, dir: undefined, user: undefined };
  const mount = (c.Mounts ?? []).find((m) => m.Destination === AGENT_DIR && m.Type === 'bind');
  if (!mount) return { socketPath: undefined, dir: undefined, user: labels[AGENT_USER_LABEL] };
  return { socketPath: join(mount.Source, AGENT_SOCKET), dir: mount.Source, user: labels[AGENT_USER_LABEL] ?? '' };
}

/** Removes a box's socket directory (only ever one directly below the state directory). */
export async function removeAgentDir(dir: string | undefined, stateDir: string): Promise<void> {
  if (!dir || resolve(dirname(dir)) !== resolve(stateDir)) return;
  await rm(dir, { recursive: true, force: true }).catch(() => undefined);
}
