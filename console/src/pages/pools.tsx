/**
 * Pools and nodes (admin): each pool's connection, boxes against its capacity, limits, security
 * and warm templates with their spares (GET /v1/warm: PoolInfo.warm names only the configured
 * templates); the remote nodes with their state, last heartbeat and capacity, drain and revoke.
 */
import type { JSX } from 'preact';
import { api } from '../api';
import { ConfirmButton, ErrorText, Page, Status, ago, bytes, duration, useAction, usePoll } from '../ui';
import { ListTable, refusedPage } from './admin-ui';
import './admin.css';

interface WarmTemplate {
  image: string;
  size: number;
  security?: string;
  memory?: number;
  cpus?: number;
  network?: string;
}
interface PoolInfo {
  name: string;
  addr: string;
  connected: boolean;
  boxes: number;
  maxPerUser: number;
  maxTotal: number;
  idleTimeoutMs: number;
  maxLifetimeMs: number;
  security: string;
  memory: number;
  cpus: number;
  agent: boolean;
  networks: string[];
  networkPolicy: { egress: unknown };
  warm: WarmTemplate[];
  ociRuntime?: string;
  pidsLimit?: number;
  maxMemory?: number;
  maxCpus?: number;
}
interface WarmInfo {
  pool: string;
  image: string;
  key: string;
  size: number;
  ready: number;
  hits: number;
  misses: number;
  replaced: number;
  failures: number;
  lastClaimMs?: number;
}
interface NodeInfo {
  name: string;
  mode: 'direct' | 'reverse';
  address?: string;
  state: 'connecting' | 'online' | 'offline' | 'revoked';
  draining: boolean;
  maxBoxes?: number;
  joinedAt: string;
  lastSeenAt?: string;
  error?: string;
  facts?: { engineVersion?: string; os?: string; arch?: string; cpus?: number; memoryBytes?: number; freeDiskBytes?: number };
  revokedAt?: string;
}

const POLL_MS = 5000;

function limitMs(ms: number): string {
  return ms > 0 ? duration(ms) : 'none';
}

function egressOf(policy: { egress: unknown }): string {
  return typeof policy.egress === 'string' ? policy.egress : 'allow list';
}

function PoolPanel({ pool, warm }: { pool: PoolInfo; warm: WarmInfo[] }): JSX.Element {
  const full = pool.maxTotal > 0 ? pool.boxes / pool.maxTotal : 0;
  return (
    <section class="panel" data-testid="pool" data-pool={pool.name} aria-label={`Pool ${pool.name}`}>
      <header class="row pool-head">
        <h2>{pool.name}</h2>
        <span data-testid="pool-connected">
          <Status status={pool.connected ? 'connected' : 'disconnected'} />
        </span>
        <span class="mono hint">{pool.addr}</span>
      </header>
      <div class="row pool-capacity">
        <span>
          Boxes <strong data-testid="pool-boxes">{pool.boxes}</strong> of {pool.maxTotal > 0 ? pool.maxTotal : '∞'}
        </span>
        {pool.maxTotal > 0 ? <meter min={0} max={1} high={0.8} value={full} aria-label="Capacity used" /> : null}
      </div>
      <dl class="info pool-info">
        <dt>Per user</dt>
        <dd>{pool.maxPerUser > 0 ? `${pool.maxPerUser} boxes` : 'no limit'}</dd>
        <dt>Box size</dt>
        <dd>
          {bytes(pool.memory)}, {pool.cpus} CPU by default
          {pool.maxMemory || pool.maxCpus
            ? `; at most ${[pool.maxMemory ? bytes(pool.maxMemory) : '', pool.maxCpus ? `${pool.maxCpus} CPU` : ''].filter(Boolean).join(', ')}`
            : ''}
          {pool.pidsLimit ? `; ${pool.pidsLimit} processes` : ''}
        </dd>
        <dt>Idle timeout</dt>
        <dd>{limitMs(pool.idleTimeoutMs)}</dd>
        <dt>Max lifetime</dt>
        <dd>{limitMs(pool.maxLifetimeMs)}</dd>
        <dt>Security</dt>
        <dd>
          {pool.security}
          {pool.ociRuntime ? ` · runtime ${pool.ociRuntime}` : ''}
          {pool.agent ? ' · agent' : ''}
        </dd>
        <dt>Network</dt>
        <dd>
          egress {egressOf(pool.networkPolicy)}
          {pool.networks.length > 0 ? ` · networks ${pool.networks.join(', ')}` : ''}
        </dd>
      </dl>
      {pool.warm.length > 0 ? (
        <div class="table-wrap warm">
          <table aria-label={`Warm templates of ${pool.name}`}>
            <thead>
              <tr>
                <th>Warm template</th>
                <th>Spares ready</th>
                <th>Hits</th>
                <th>Misses</th>
                <th>Replaced</th>
                <th>Failures</th>
                <th>Last claim</th>
              </tr>
            </thead>
            <tbody>
              {pool.warm.map((t, i) => {
                // The live state is by template key; match it by image (and order, for two of the same image).
                const live = warm.filter((w) => w.image === t.image)[pool.warm.slice(0, i).filter((o) => o.image === t.image).length];
                return (
                  <tr key={i} data-testid="warm-template">
                    <td class="mono">{t.image}</td>
                    <td>
                      {live?.ready ?? '—'} / {t.size}
                    </td>
                    <td>{live?.hits ?? '—'}</td>
                    <td>{live?.misses ?? '—'}</td>
                    <td>{live?.replaced ?? '—'}</td>
                    <td>{live?.failures ?? '—'}</td>
                    <td>{live?.lastClaimMs !== undefined ? `${Math.round(live.lastClaimMs)} ms` : '—'}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : (
        <p class="hint">No warm templates.</p>
      )}
    </section>
  );
}

function NodesTable({ nodes, reload }: { nodes: NodeInfo[]; reload: () => void }): JSX.Element {
  const drain = useAction(
    (name: string, draining: boolean) => api(`/v1/nodes/${encodeURIComponent(name)}/drain`, { method: 'POST', json: { draining } }),
    reload,
  );
  const revoke = useAction((name: string) => api(`/v1/nodes/${encodeURIComponent(name)}/revoke`, { method: 'POST' }), reload);
  if (nodes.length === 0) return <p class="hint">No remote nodes have joined (docs/nodes.md).</p>;
  return (
    <>
      <ErrorText error={drain.error ?? revoke.error} />
      <ListTable headers={['Node', 'State', 'Last heartbeat', 'Capacity', 'Machine']} loaded empty={false}>
        {nodes.map((n) => (
          <tr key={n.name} data-testid="node-row" data-node={n.name}>
            <td>
              <strong>{n.name}</strong>
              <div class="hint">
                {n.mode}
                {n.address ? ` · ${n.address}` : ''}
              </div>
            </td>
            <td>
              <Status status={n.state} />
              {n.draining ? <span class="hint"> draining</span> : null}
              {n.error ? <div class="hint">{n.error}</div> : null}
            </td>
            <td title={n.lastSeenAt}>{n.lastSeenAt ? `${ago(n.lastSeenAt)} ago` : '—'}</td>
            <td>{n.maxBoxes ? `${n.maxBoxes} boxes` : 'no limit'}</td>
            <td>
              {n.facts?.cpus ? `${n.facts.cpus} CPU` : ''}
              {n.facts?.memoryBytes ? ` · ${bytes(n.facts.memoryBytes)}` : ''}
              {n.facts?.freeDiskBytes ? ` · ${bytes(n.facts.freeDiskBytes)} free` : ''}
              {n.facts?.engineVersion ? <div class="hint">engine {n.facts.engineVersion}</div> : null}
            </td>
            <td class="row">
              {n.state !== 'revoked' ? (
                <>
                  {n.draining ? (
                    <button type="button" disabled={drain.busy} onClick={() => drain.run(n.name, false)}>
                      Undrain
                    </button>
                  ) : (
                    <ConfirmButton
                      label="Drain"
                      confirm={`Drain ${n.name}? No new boxes go there.`}
                      disabled={drain.busy}
                      onConfirm={() => drain.run(n.name, true)}
                    />
                  )}
                  <ConfirmButton
                    label="Revoke"
                    danger
                    confirm={`Revoke ${n.name}? Its connection ends now.`}
                    disabled={revoke.busy}
                    onConfirm={() => revoke.run(n.name)}
                  />
                </>
              ) : null}
            </td>
          </tr>
        ))}
      </ListTable>
    </>
  );
}

export function PoolsPage(): JSX.Element {
  const pools = usePoll((signal) => api<{ pools: PoolInfo[] }>('/v1/pools', { signal }), POLL_MS);
  const warm = usePoll((signal) => api<{ templates: WarmInfo[] }>('/v1/warm', { signal }), POLL_MS);
  const nodes = usePoll((signal) => api<{ nodes: NodeInfo[] }>('/v1/nodes', { signal }), POLL_MS);
  const refused = refusedPage('Pools & nodes', pools);
  if (refused) return refused;
  return (
    <Page title="Pools & nodes">
      <ErrorText error={pools.error ?? warm.error} />
      {pools.data ? (
        pools.data.pools.map((p) => <PoolPanel key={p.name} pool={p} warm={(warm.data?.templates ?? []).filter((w) => w.pool === p.name)} />)
      ) : (
        <p class="loading">Loading…</p>
      )}
      <h2>Nodes</h2>
      <ErrorText error={nodes.error} />
      {nodes.data ? <NodesTable nodes={nodes.data.nodes} reload={nodes.reload} /> : null}
    </Page>
  );
}
