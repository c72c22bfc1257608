/**
 * Injection of the in-box agent into Docker boxes (docs/agent.md): at create, the agent binary
 * for the image's architecture is bind-mounted read-only at /.sbx/sbx-agent and made the
 * entrypoint (PID 1) with the box's command as its child, running as the box's user. The agent
 * serves exec on TCP port AGENT_PORT of every address of the box; the host dials the box's bridge
 * address and proves the per-box token the container's env hands the agent (a proof bound to that
 * address, agent-client.ts helloProof; the token itself never goes on the wire). No host directory
 * is mounted writable: a box cannot write on the host through its agent. A restarted runtime reads
 * the token and the address back from the container's inspect: nothing is stored on the host.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import { invalidArgument } from '../../errors.js';
import { AGENT_BIN, AGENT_CAPS, AGENT_PORT, AGENT_TOKEN_ENV } from '../agent-protocol.js';
import type { ContainerSpec } from '../types.js';
import { IMAGE_OWNER_LABEL } from '../types.js';

export { AGENT_BIN };
/** Labels the runtime puts on a box with the agent: the protocol version and the box's user. */
export const AGENT_LABEL = 'sbx.agent';
export const AGENT_USER_LABEL = 'sbx.agent.user';
/**
 * Network modes the host cannot dial the agent in: none (no address), host (the agent would
 * listen on the host's own addresses), another container's namespace (its port is that one's).
 */
const NO_AGENT_NETWORK = /^(none|host|container:.*)$/;

/** The image fields the injection needs: what the agent must run, as whom, on which CPU. */
export interface ImageConfig {
  id: string;
  architecture: string;
  entrypoint: string[];
  cmd: string[];
  user: string;
  envHasHome: boolean;
  /** The owner the image belongs to (IMAGE_OWNER_LABEL: a committed box), if any. */
  owner?: string;
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
    ...(cfg?.Labels?.[IMAGE_OWNER_LABEL] ? { owner: cfg.Labels[IMAGE_OWNER_LABEL] } : {}),
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
  /** The agent's secret (in the container's env; the host presents it in every HELLO). */
  token: string;
  user: string;
}

/**
 * The spec with the agent injected, or a reason why the box gets none (no binary for the image's
 * architecture, capabilities the agent needs are dropped, a network the host cannot dial it in).
 * A box that gets the agent cannot publish its port or set its token (invalid_argument).
 */
export function injectAgent(spec: ContainerSpec, image: ImageConfig, agentDir: string): Injection | { skip: string } {
  const binary = agentBinaryFor(agentDir, image.architecture);
  if (!binary) return { skip: `no agent binary for architecture '${image.architecture}' in ${agentDir} (scripts/agent.sh builds them)` };
  // The agent switches users and kills any process of the box: a box whose capabilities lack
  // KILL, SETUID or SETGID (the strict profile drops all) keeps the engine's exec rather than
  // gaining them (a uid-0 process would keep them in its bounding set).
  const sec = spec.security ?? {};
  const dropsAll = sec.capDrop?.includes('ALL') ?? false;
  const missing = AGENT_CAPS.filter((c) => (dropsAll || sec.capDrop?.includes(c)) && !sec.capAdd?.includes(c));
  if (missing.length) return { skip: `the box's capabilities lack ${missing.join(', ')}, which the agent needs` };
  if (spec.network && NO_AGENT_NETWORK.test(spec.network)) return { skip: `network '${spec.network}': the host cannot dial the agent there` };
  if (spec.env?.[AGENT_TOKEN_ENV] !== undefined) throw invalidArgument('env', `${AGENT_TOKEN_ENV} is the in-box agent's own variable`);
  if (spec.ports?.some((p) => p.containerPort === AGENT_PORT)) {
    throw invalidArgument('ports', `port ${AGENT_PORT} is the in-box agent's; choose another`);
  }
  const token = randomBytes(32).toString('hex');

  const user = spec.user ?? image.user;
  const entrypoint = spec.entrypoint ?? image.entrypoint;
  // As the engine merges them: an entrypoint given at create drops the image's CMD.
  const cmd = spec.cmd ?? (spec.entrypoint ? [] : image.cmd);
  const args = [
    AGENT_BIN,
    'init',
    // Every address: the host dials the bridge address, whichever the engine gave at this start,
    // and no box process can bind the port on any single address before or beside the agent.
    '--listen',
    `0.0.0.0:${AGENT_PORT}`,
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
      env: { ...(spec.env ?? {}), [AGENT_TOKEN_ENV]: token },
      labels: { ...(spec.labels ?? {}), [AGENT_LABEL]: '1', [AGENT_USER_LABEL]: user },
      // Read-only: the one host path of the agent's; nothing of the box's can be written through it.
      binds: [...(spec.binds ?? []), { hostPath: binary, containerPath: AGENT_BIN, readOnly: true }],
    },
    token,
    user,
  };
}

/** What the runtime knows about one box's agent. */
export interface AgentBox {
  /** The agent's secret; undefined: the box has no agent this host can dial. */
  token: string | undefined;
  /**
   * The box's bridge address where the agent listens, as of the last start this runtime saw or
   * inspect it made (a box that restarts may get another): undefined until then.
   */
  address?: string;
  /** The box's user (the container runs as root with the agent: the engine path must say it). */
  user: string | undefined;
  /** Set when the agent refused this host (protocol version): the engine path serves the box. */
  refused?: string;
  /** The container start (StartedAt) at which the agent last answered. */
  verifiedStart?: string;
}

/**
 * The agent of a container, from its inspect: the token from its env, the address from its
 * networks. A box created by an earlier sbx with the agent's socket in a host directory has no
 * token: the engine's exec serves it (docs/agent.md, "Boxes from before").
 */
export function agentBoxOf(c: Docker.ContainerInspectInfo): AgentBox {
  const labels = c.Config?.Labels ?? {};
  if (labels[AGENT_LABEL] === undefined) return { token: undefined, user: undefined };
  const prefix = `${AGENT_TOKEN_ENV}=`;
  const token = (c.Config?.Env ?? []).find((e) => e.startsWith(prefix))?.slice(prefix.length);
  const address = c.State?.Running ? bridgeAddressOf(c) : undefined;
  return { token: token || undefined, user: labels[AGENT_USER_LABEL] ?? '', ...(address ? { address } : {}) };
}

/** The container's address on its network, which a local engine's host can dial (its bridge). */
export function bridgeAddressOf(c: Docker.ContainerInspectInfo): string | undefined {
  const networks = Object.values(c.NetworkSettings?.Networks ?? {});
  return networks.map((n) => n.IPAddress).find((ip) => !!ip);
}
