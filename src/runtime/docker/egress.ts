/**
 * Egress rules of Docker boxes (issue 28, docs/network.md): the client of `sbx-egress`, one helper
 * container per engine (`egress/`, built by scripts/images.sh) that owns the nftables table
 * `inet sbx_egress` in the engine machine's network namespace: a forward-hook chain per box, keyed
 * by the box's address, and a DNS proxy that answers allowed names only and opens their addresses.
 * Traffic from a box network that no registered address sent is dropped (fail closed), so the
 * runtime registers every box it starts, `all` included, before `start` resolves.
 *
 * The helper (`--network host --cap-drop ALL --cap-add NET_ADMIN --read-only`, restart
 * unless-stopped) is made when first needed, by whichever sbx process gets there first: a create
 * that finds the name taken (409) inspects what the other made, as box-network.ts does with its
 * networks. It is made again when its image label is not the image's current id (a rebuilt
 * image). Its state (`state.json`) and socket live in a host directory per engine,
 * `/run/sbx-egress/<engine id>`: several engines on one machine (the tests' network namespace
 * engines) each have their own. sbx talks HTTP to it over that socket when the engine is on this
 * machine and the socket is there to open, else through `docker exec sbx-egress sbx-egress call`.
 */
import { EGRESS_ALL } from '../egress-spec.js';
import { existsSync } from 'node:fs';
import http from 'node:http';
import { isIP } from 'node:net';
import type Docker from 'dockerode';
import { SbxError, invalidArgument } from '../../errors.js';
import { EgressSpecSchema } from '../spec.js';
import type { EgressSpec } from '../types.js';
import { boxNetworkIndex } from './box-network.js';
import type { DockerConnection } from './connection.js';
import { wholeFrames } from './demux.js';
import { engineStatus } from './errors.js';
import { runBuffered } from './exec.js';

/** The helper container's name on every engine. */
export const EGRESS_CONTAINER = 'sbx-egress';
/** A box's egress rules at create (JSON of its EgressSpec); a later setEgress lives in the helper only. */
export const EGRESS_LABEL = 'sbx.egress';
/** The helper's image id, to know when the image was rebuilt. */
export const EGRESS_IMAGE_LABEL = 'sbx.egress.image';
export const DEFAULT_EGRESS_IMAGE = 'sbx-egress:latest';
/** Where the helper's directories are on the engine's machine, one per engine: `<dir>/<engine id>`. */
export const EGRESS_HOST_DIR = '/run/sbx-egress';
/** The port the helper's DNS proxy listens on (the bridge gateway; boxes' port 53 is redirected there). */
export const EGRESS_DNS_PORT = 15353;
const ROLE_LABEL = 'sbx.role';
const SOCKET = 'egress.sock';
/** How long a new (or restarted) helper may take to answer. */
const HELPER_START_MS = 20_000;
/** How long one call to the helper may take (a PUT of 1000 entries is one nft transaction). */
const CALL_TIMEOUT_MS = 30_000;
/** How long "the image is not there" is believed before the engine is asked again. */
const MISSING_RECHECK_MS = 30_000;

const EGRESS_NONE: EgressSpec = { mode: 'none', allow: [], deny: [], endpoints: [] };

/** An entry of the helper: a box's addresses and rules. */
export interface EgressEntry {
  id: string;
  addresses: string[];
  spec: EgressSpec;
}

/** How a box is attached: a box network (the helper filters it), no network at all, or another network (not filtered). */
export type EgressAttachment = 'box' | 'none' | 'other';

/** Where a spec's network puts a box (the same rule as BoxIsolation.create: no network means a box network). */
export function attachmentOfNetwork(network: string | undefined): EgressAttachment {
  if (!network || boxNetworkIndex(network) !== undefined) return 'box';
  return network === 'none' ? 'none' : 'other';
}

/** A container's networks, as an inspect and a list entry both give them. */
interface Networked {
  NetworkSettings?: { Networks?: Record<string, { IPAddress?: string; GlobalIPv6Address?: string; MacAddress?: string }> };
}

/**
 * Where a box is on the box networks: its addresses (what the helper keys its rules by) and its
 * interfaces' MACs, which the helper binds them to: a packet from a box's address but another
 * MAC (another box sending from a foreign source, which IPv6 allows without any capability) is
 * dropped. None: the box is not (or no longer) on a box network.
 */
export interface BoxInterfaces {
  addresses: string[];
  macs: string[];
}
export const NO_INTERFACES: BoxInterfaces = { addresses: [], macs: [] };

export function boxInterfacesOf(c: Networked): BoxInterfaces {
  const out: BoxInterfaces = { addresses: [], macs: [] };
  for (const [name, n] of Object.entries(c.NetworkSettings?.Networks ?? {})) {
    if (boxNetworkIndex(name) === undefined) continue;
    if (n.IPAddress) out.addresses.push(n.IPAddress);
    if (n.GlobalIPv6Address) out.addresses.push(n.GlobalIPv6Address);
    if (n.MacAddress && (n.IPAddress || n.GlobalIPv6Address)) out.macs.push(n.MacAddress);
  }
  return out;
}

/** How a container is attached (from the engine's inspect): on a box network, on none, or elsewhere. */
export function attachmentOf(c: Docker.ContainerInspectInfo): EgressAttachment {
  const names = Object.keys(c.NetworkSettings?.Networks ?? {});
  if (names.some((n) => boxNetworkIndex(n) !== undefined)) return 'box';
  const mode = c.HostConfig?.NetworkMode ?? '';
  return names.length === 0 || mode === 'none' || names.every((n) => n === 'none') ? 'none' : 'other';
}

/**
 * A box's rules as its create gave them (the `sbx.egress` label): `all` without the label; a
 * label that does not parse (not written by sbx) closes everything rather than open it.
 */
export function egressFromLabels(labels: Record<string, string> | undefined): EgressSpec {
  const raw = labels?.[EGRESS_LABEL];
  return raw === undefined || raw === '' ? EGRESS_ALL : parseEgress(raw);
}

/** An EgressSpec from JSON; anything that is not one closes everything rather than open it. */
function parseEgress(raw: unknown): EgressSpec {
  try {
    const parsed = EgressSpecSchema.safeParse(typeof raw === 'string' ? JSON.parse(raw) : raw);
    return parsed.success ? (parsed.data as EgressSpec) : EGRESS_NONE;
  } catch {
    return EGRESS_NONE;
  }
}

/**
 * The upstream resolvers option: `ip` (port 53), `ip:port`, `[ipv6]:port`, bare IPv6; each as
 * the helper takes it (`ip:port`, `[ipv6]:port`). Default `$SBX_EGRESS_DNS` (a comma list).
 *
 * @example
 * parseEgressDns(['198.18.0.53']); // ['198.18.0.53:53']
 */
export function parseEgressDns(given: string[] | undefined, env: NodeJS.ProcessEnv = process.env): string[] {
  const list = given ?? (env['SBX_EGRESS_DNS'] ?? '').split(',');
  const field = given ? 'egressDns' : 'SBX_EGRESS_DNS';
  return list
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map((s) => {
      const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(s) ?? /^([^:]+):(\d{1,5})$/.exec(s);
      const [host, port] = m ? [m[1]!, Number(m[2])] : [s, 53];
      const family = isIP(host);
      if (!family || port < 1 || port > 65535) throw invalidArgument(field, `${s} is not a resolver address (ip, ip:port or [ipv6]:port)`);
      return family === 6 ? `[${host}]:${port}` : `${host}:${port}`;
    });
}

/** The way to the helper: its socket on this machine, or `docker exec`. */
type Channel = { kind: 'socket'; path: string } | { kind: 'exec' };

/** What a call to the helper answered. */
interface Reply {
  status: number;
  body: string;
}

/** Why a box cannot get its egress rules: the stable reason and the way out. */
export function egressUnavailable(why: string, cause?: unknown): SbxError {
  return new SbxError('not_available', `${why}; boxes with an egress policy other than 'all' cannot be created or changed on this engine`, {
    details: { reason: 'egress' },
    ...(cause ? { cause } : {}),
  });
}

/**
 * The helper of one engine, as a runtime uses it.
 *
 * @example
 * const egress = new DockerEgress(conn, { local: true, image: DEFAULT_EGRESS_IMAGE, dns: [] });
 * if (await egress.available()) await egress.put(id, { addresses: ['172.18.0.5'], macs: ['02:42:ac:12:00:05'] }, spec);
 */
export class DockerEgress {
  private ready: Promise<Channel | undefined> | undefined;
  private missingSince = 0;
  private warned = false;
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

  constructor(
    private readonly conn: DockerConnection,
    private readonly opts: { local: boolean; image: string; dns: string[] },
  ) {}

  private get docker(): Docker {
    return this.conn.docker;
  }

  /** Whether the helper runs (made first if need be); false: its image is not on the engine and no helper is there. */
  async available(): Promise<boolean> {
    return (await this.channel()) !== undefined;
  }

  /** The image missing: the error a create or setEgress with a policy other than `all` gets. */
  missingError(): SbxError {
    return egressUnavailable(
      `the egress enforcer's image ${this.opts.image} is not on the Docker Engine at ${this.conn.address.raw}: build it there with scripts/images.sh (images/sbx-egress), or give the runtime option egressImage`,
    );
  }

  /** Registers (or replaces) a box's addresses, MACs and rules; resolves once they are in force. */
  async put(id: string, where: BoxInterfaces, spec: EgressSpec): Promise<void> {
    await this.call('PUT', `/v1/boxes/${encodeURIComponent(id)}`, JSON.stringify({ ...where, spec, dns: this.opts.dns }));
  }

  /** A box's entry, or undefined when the helper has none (or does not run). */
  async get(id: string): Promise<EgressEntry | undefined> {
    if (!(await this.available())) return undefined;
    const r = await this.call('GET', `/v1/boxes/${encodeURIComponent(id)}`, undefined, true);
    return r.status === 404 ? undefined : parseEntry(JSON.parse(r.body) as Partial<EgressEntry>);
  }

  /** Forgets a box (nothing when it has no entry or no helper runs). */
  async delete(id: string): Promise<void> {
    if (!(await this.available())) return;
    await this.call('DELETE', `/v1/boxes/${encodeURIComponent(id)}`, undefined, true);
  }

  /** Every entry of the helper ([] when none runs). */
  async list(): Promise<EgressEntry[]> {
    if (!(await this.available())) return [];
    const r = await this.call('GET', '/v1/boxes');
    const parsed = JSON.parse(r.body || '[]') as unknown;
    return Array.isArray(parsed) ? parsed.map((e) => parseEntry(e as Partial<EgressEntry>)) : [];
  }

  /**
   * Takes a box's addresses off its entry once it no longer runs, keeping its rules: the engine
   * gives a released address to the next box it starts, whose packets would otherwise follow this
   * box's rules until its own registration moves the address. A box started again meanwhile (a
   * restart racing this) is registered again with its new addresses.
   */
  async release(id: string): Promise<void> {
    if (!(await this.available())) return;
    const running = async () =>
      this.docker
        .getContainer(id)
        .inspect()
        .then((c) => (c.State.Running ? c : undefined))
        .catch(() => undefined);
    if (await running()) return;
    const entry = await this.get(id);
    if (!entry || entry.addresses.length === 0) return;
    await this.put(entry.id, NO_INTERFACES, entry.spec);
    const again = await running();
    if (again) await this.put(entry.id, boxInterfacesOf(again), ((await this.get(entry.id)) ?? entry).spec);
  }

  /**
   * Deletes the entries of containers that are gone, and releases the addresses of those that no
   * longer run. The helper is listed first and the engine second: a box registered after the
   * first list is not in it, and one in it was created before the second, so only containers that
   * are really gone lose their entry.
   */
  async sweep(): Promise<void> {
    const entries = await this.list();
    if (entries.length === 0) return;
    const state = new Map((await this.docker.listContainers({ all: true })).map((c) => [c.Id, c.State]));
    for (const e of entries) {
      if (!state.has(e.id)) await this.delete(e.id);
      else if (state.get(e.id) !== 'running' && e.addresses.length > 0) await this.release(e.id);
    }
  }

  async close(): Promise<void> {
    this.agent.destroy();
  }

  private channel(): Promise<Channel | undefined> {
    // "The image is not there" is asked again now and then: it may be built while sbx runs.
    if (this.ready && this.missingSince && Date.now() - this.missingSince > MISSING_RECHECK_MS) this.ready = undefined;
    return (this.ready ??= this.ensure().then(
      (ch) => {
        this.missingSince = ch ? 0 : Date.now();
        return ch;
      },
      (err: unknown) => {
        this.ready = undefined;
        throw err;
      },
    ));
  }

  /**
   * The helper made (or remade for a new image), started and answering. Several sbx processes
   * may do this at once on one engine: whoever loses a create (409) or finds its container gone
   * under it (404) looks again.
   */
  private async ensure(): Promise<Channel | undefined> {
    const image = await this.docker
      .getImage(this.opts.image)
      .inspect()
      .catch((err: unknown) => {
        if (engineStatus(err) === 404) return undefined;
        throw err;
      });
    for (let attempt = 0; attempt < 8; attempt++) {
      let c = await this.inspectHelper();
      if (c && image && c.Config.Labels?.[EGRESS_IMAGE_LABEL] !== image.Id) {
        // A rebuilt image: its rules and state (state.json) carry over to the new helper.
        await this.docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch((err: unknown) => {
            if (engineStatus(err) !== 404 && engineStatus(err) !== 409) throw err;
          });
        c = undefined;
      }
      let made = false;
      if (!c) {
        if (!image) {
          if (!this.warned) {
            this.warned = true;
            process.emitWarning(`${this.missingError().message}. Boxes with egress 'all' run without it.`, { code: 'SBX_EGRESS_UNAVAILABLE' });
          }
          return undefined;
        }
        try {
          await this.docker.createContainer(await this.helperConfig(image.Id));
          made = true;
        } catch (err) {
          // Another sbx process made it (409) or the image went away meanwhile: look again.
          if (engineStatus(err) === 409 || engineStatus(err) === 404) continue;
          throw err;
        }
      }
      if (!c?.State.Running || c.State.Paused) {
        try {
          if (c?.State.Paused) await this.docker.getContainer(EGRESS_CONTAINER).unpause();
          else await this.docker.getContainer(EGRESS_CONTAINER).start();
        } catch (err) {
          if (engineStatus(err) === 404) continue;
          if (engineStatus(err) !== 304 && !/is already (running|in progress)|is not paused/i.test(String((err as Error).message))) throw err;
        }
      }
      const channel = await this.connect();
      if (made) await this.adopt(channel);
      return channel;
    }
    throw egressUnavailable(`the egress enforcer container ${EGRESS_CONTAINER} on ${this.conn.address.raw} kept changing while sbx set it up`);
  }

  /** The container named sbx-egress, when it is the helper (one of that name that is not sbx's is not used). */
  private async inspectHelper(): Promise<Docker.ContainerInspectInfo | undefined> {
    let c: Docker.ContainerInspectInfo;
    try {
      c = await this.docker.getContainer(EGRESS_CONTAINER).inspect();
    } catch (err) {
      if (engineStatus(err) === 404) return undefined;
      throw err;
    }
    const labels = c.Config.Labels ?? {};
    if (labels['sbx.managed-by'] !== 'sbx' || labels[ROLE_LABEL] !== 'egress') {
      throw new SbxError(
        'conflict',
        `container ${EGRESS_CONTAINER} on ${this.conn.address.raw} is not sbx's egress enforcer (labels sbx.managed-by=sbx, ${ROLE_LABEL}=egress); remove it and sbx makes it again`,
        { details: { container: EGRESS_CONTAINER, reason: 'egress' } },
      );
    }
    return c;
  }

  private async helperConfig(imageId: string): Promise<Docker.ContainerCreateOptions> {
    const info = (await this.docker.info()) as { ID?: string };
    return {
      name: EGRESS_CONTAINER,
      Image: imageId,
      // Named here whatever the image's entrypoint: `sbx-egress node` (found on the image's PATH).
      Entrypoint: ['sbx-egress'],
      Cmd: ['node'],
      Labels: { 'sbx.managed-by': 'sbx', [ROLE_LABEL]: 'egress', [EGRESS_IMAGE_LABEL]: imageId },
      HostConfig: {
        NetworkMode: 'host',
        CapDrop: ['ALL'],
        CapAdd: ['NET_ADMIN'],
        SecurityOpt: ['no-new-privileges'],
        ReadonlyRootfs: true,
        RestartPolicy: { Name: 'unless-stopped' },
        // Binds, not Mounts: the engine makes the directory on its machine when it is missing.
        Binds: [`${EGRESS_HOST_DIR}/${engineDirName(info.ID ?? '')}:${EGRESS_HOST_DIR}`],
      },
    };
  }

  /**
   * How to reach the running helper, once it answers: its socket when this machine has it and
   * may open it, else `docker exec`.
   */
  private async connect(): Promise<Channel> {
    const deadline = Date.now() + HELPER_START_MS;
    let socket: Channel | undefined;
    if (this.opts.local) {
      const info = (await this.docker.info()) as { ID?: string };
      const dir = `${EGRESS_HOST_DIR}/${engineDirName(info.ID ?? '')}`;
      // The directory is the engine's to make (the bind mount): without it, sbx runs elsewhere.
      if (existsSync(dir)) socket = { kind: 'socket', path: `${dir}/${SOCKET}` };
    }
    let last: unknown;
    for (;;) {
      const channel: Channel = socket ?? { kind: 'exec' };
      try {
        const r = await this.send(channel, 'GET', '/v1/health');
        if (r.status === 200) return channel;
        last = new Error(`health: ${r.status} ${r.body}`);
      } catch (err) {
        last = err;
        // The socket is root's (0600): a process that may not open it goes through the engine.
        if ((err as NodeJS.ErrnoException).code === 'EACCES' && socket) {
          socket = undefined;
          continue;
        }
      }
      const c = await this.inspectHelper();
      if (!c) throw egressUnavailable(`the egress enforcer container ${EGRESS_CONTAINER} on ${this.conn.address.raw} went away`, last);
      if (!c.State.Running && !c.State.Restarting) {
        throw egressUnavailable(
          `the egress enforcer container ${EGRESS_CONTAINER} on ${this.conn.address.raw} exited (${c.State.ExitCode}): ${await this.logTail()}`,
          last,
        );
      }
      if (Date.now() > deadline) {
        throw egressUnavailable(
          `the egress enforcer container ${EGRESS_CONTAINER} on ${this.conn.address.raw} did not answer within ${HELPER_START_MS / 1000} s (${String((last as Error)?.message ?? last)})`,
          last,
        );
      }
      await new Promise((r) => setTimeout(r, channel.kind === 'socket' ? 20 : 200));
    }
  }

  /**
   * Registers the running containers on box networks that the helper does not know, with the
   * rules of their labels: a helper made just now (sbx upgraded, the helper and its state removed)
   * would drop their traffic otherwise.
   */
  private async adopt(channel: Channel): Promise<void> {
    const known = new Set((JSON.parse((await this.send(channel, 'GET', '/v1/boxes')).body || '[]') as Array<{ id?: string }>).map((e) => e.id));
    for (const c of await this.docker.listContainers({ filters: { status: ['running'] } })) {
      const where = boxInterfacesOf(c as Networked);
      if (known.has(c.Id) || where.addresses.length === 0) continue;
      const r = await this.send(channel, 'PUT', `/v1/boxes/${c.Id}`, JSON.stringify({ ...where, spec: egressFromLabels(c.Labels), dns: this.opts.dns }));
      if (r.status >= 300) throw helperError(r, 'PUT', c.Id);
    }
  }

  /**
   * One call to the helper. A helper that went away (restarted, removed) is set up again and the
   * call made once more; `allow404` hands a 404 back instead of failing.
   */
  private async call(method: string, path: string, body?: string, allow404 = false): Promise<Reply> {
    for (let attempt = 0; ; attempt++) {
      const channel = await this.channel();
      if (!channel) throw this.missingError();
      let r: Reply;
      try {
        r = await this.send(channel, method, path, body);
      } catch (err) {
        if (attempt > 0) throw egressUnavailable(`the egress enforcer on ${this.conn.address.raw} did not answer ${method} ${path}`, err);
        this.ready = undefined;
        continue;
      }
      if (r.status < 300 || (allow404 && r.status === 404)) return r;
      throw helperError(r, method, path);
    }
  }

  private send(channel: Channel, method: string, path: string, body?: string): Promise<Reply> {
    return channel.kind === 'socket' ? this.sendSocket(channel.path, method, path, body) : this.sendExec(method, path, body);
  }

  private sendSocket(socketPath: string, method: string, path: string, body?: string): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : Buffer.from(body);
      const req = http.request(
        {
          socketPath,
          method,
          path,
          agent: this.agent,
          timeout: CALL_TIMEOUT_MS,
          headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {},
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${CALL_TIMEOUT_MS / 1000} s`)));
      req.on('error', reject);
      req.end(data);
    });
  }

  /**
   * The same call through `docker exec sbx-egress sbx-egress call <METHOD> <PATH>` (body on stdin,
   * answer on stdout; exit 1 with the error on stderr, which names a 404).
   */
  private async sendExec(method: string, path: string, body?: string): Promise<Reply> {
    const r = await runBuffered(this.conn, EGRESS_CONTAINER, ['sbx-egress', 'call', method, path], { stdin: body ?? '', timeoutMs: CALL_TIMEOUT_MS });
    if (r.exitCode === 0) return { status: 200, body: r.stdout };
    const status = /\b404\b|not found/i.test(r.stderr) ? 404 : /\b400\b/.test(r.stderr) ? 400 : 500;
    return { status, body: JSON.stringify({ error: r.stderr.trim() || `exit ${r.exitCode}` }) };
  }

  private async logTail(): Promise<string> {
    try {
      const raw = (await this.docker.getContainer(EGRESS_CONTAINER).logs({ stdout: true, stderr: true, tail: 5, follow: false })) as unknown as Buffer;
      const parts: Buffer[] = [];
      for await (const f of wholeFrames([raw])) parts.push(f.payload);
      return Buffer.concat(parts).toString('utf8').trim() || 'no output';
    } catch {
      return 'its log could not be read';
    }
  }
}

/** The engine's ID as a directory name: every character outside [A-Za-z0-9] becomes `-`. */
export function engineDirName(engineId: string): string {
  return engineId.replace(/[^A-Za-z0-9]/g, '-') || 'unknown';
}

function parseEntry(e: Partial<EgressEntry>): EgressEntry {
  return { id: String(e.id ?? ''), addresses: Array.isArray(e.addresses) ? e.addresses.map(String) : [], spec: parseEgress(e.spec) };
}

/** A refusal of the helper: its 400 is the spec's fault (invalid_argument), anything else its own. */
function helperError(r: Reply, method: string, path: string): SbxError {
  let text = r.body;
  try {
    text = (JSON.parse(r.body) as { error?: string }).error ?? r.body;
  } catch {
    // Not JSON: its text as it came.
  }
  if (r.status === 400) return invalidArgument('egress', `the egress enforcer refused the rules: ${text}`);
  return egressUnavailable(`the egress enforcer answered ${method} ${path} with ${r.status}: ${text}`);
}
