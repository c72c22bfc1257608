/**
 * The boxes list (`#/boxes?status=&owner=&pool=&q=`): polled, filtered in the page, with each
 * running box's CPU and memory asked a few at a time, row actions, and the create form.
 * Only GETs poll: reading a box is not use, so the list never keeps a box alive.
 */
import type { JSX } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, api, encodePath } from '../api';
import { useUser } from '../app';
import { currentRoute, href, navigate } from '../router';
import type { BoxInfo, BoxList, BoxStatus } from '../types';
import { ConfirmButton, ErrorText, Field, Page, Status, ago, bytes, useAction, usePoll } from '../ui';
import './boxes.css';

const LIST_EVERY_MS = 2000;
const STATS_EVERY_MS = 5000;
/** Stats requests in flight at once, and the most boxes asked per round. */
const STATS_PARALLEL = 3;
const STATS_MAX_BOXES = 50;
const STATUSES: BoxStatus[] = ['creating', 'running', 'paused', 'restarting', 'stopped', 'archived'];
const POLICIES = ['oneshot', 'session', 'longrunning', 'persistent'];

export const boxPath = (id: string, rest = ''): string => `/v1/boxes/${encodePath(id)}${rest}`;

export type LifecycleVerb = 'stop' | 'start' | 'pause' | 'resume' | 'archive';

export function lifecycle(id: string, verb: LifecycleVerb): Promise<BoxInfo> {
  return api<BoxInfo>(boxPath(id, `/${verb}`), { method: 'POST' });
}

export function removeBox(id: string): Promise<void> {
  return api<void>(boxPath(id), { method: 'DELETE' });
}

/** The lifecycle steps that make sense from a status (the API refuses the rest with 409 anyway). */
export function verbsFor(status: BoxStatus): LifecycleVerb[] {
  switch (status) {
    case 'running':
      return ['stop', 'pause'];
    case 'paused':
      return ['resume', 'stop'];
    case 'stopped':
      return ['start'];
    case 'archived':
      return ['resume'];
    default:
      return ['stop'];
  }
}

export interface BoxStats {
  cpuPercent: number | null;
  memoryBytes: number | null;
  memoryLimitBytes: number | null;
}

export function cpuText(s: BoxStats | undefined): string {
  return s?.cpuPercent === null || s?.cpuPercent === undefined ? '—' : `${s.cpuPercent.toFixed(1)} %`;
}

export function memoryText(s: BoxStats | undefined): string {
  if (s?.memoryBytes === null || s?.memoryBytes === undefined) return '—';
  return s.memoryLimitBytes ? `${bytes(s.memoryBytes)} / ${bytes(s.memoryLimitBytes)}` : bytes(s.memoryBytes);
}

/**
 * The CPU and memory of `ids`, asked every STATS_EVERY_MS, STATS_PARALLEL at a time. Any error
 * (the route missing, a box gone, a runtime without stats) reads as unknown: '—'.
 */
function useStats(ids: string[]): Map<string, BoxStats> {
  const [stats, setStats] = useState(new Map<string, BoxStats>());
  const want = useRef(ids);
  want.current = ids.slice(0, STATS_MAX_BOXES);
  const unknown: BoxStats = { cpuPercent: null, memoryBytes: null, memoryLimitBytes: null };
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const round = async (): Promise<void> => {
      const queue = [...want.current];
      const got = new Map<string, BoxStats>();
      const worker = async (): Promise<void> => {
        for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
          got.set(id, await api<BoxStats>(boxPath(id, '/stats'), { signal: ctl.signal }).catch(() => unknown));
        }
      };
      await Promise.all(Array.from({ length: STATS_PARALLEL }, worker));
      if (ctl.signal.aborted) return;
      setStats(got);
      // Nothing to ask yet (the list's first answer is still on its way): look again soon, asking nothing.
      const next = got.size === 0 ? 500 : STATS_EVERY_MS;
      timer = setTimeout(() => void round(), document.hidden ? next * 5 : next);
    };
    void round();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, []);
  return stats;
}

interface Filters {
  status: string;
  owner: string;
  pool: string;
  q: string;
}

function filtersOf(query: URLSearchParams): Filters {
  return { status: query.get('status') ?? '', owner: query.get('owner') ?? '', pool: query.get('pool') ?? '', q: query.get('q') ?? '' };
}

/** The filters into the hash's query, replacing the entry (typing a search is not a history of pages). */
function keepInHash(f: Filters): void {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  const s = q.toString();
  history.replaceState(null, '', `${href('boxes')}${s ? `?${s}` : ''}`);
}

function matches(b: BoxInfo, f: Filters): boolean {
  if (f.status && b.status !== f.status) return false;
  if (f.owner && b.owner !== f.owner) return false;
  if (f.pool && b.pool !== f.pool) return false;
  const q = f.q.trim().toLowerCase();
  if (!q) return true;
  const hay = [b.id, b.image, ...Object.entries(b.labels).map(([k, v]) => `${k}=${v}`)].join('\n').toLowerCase();
  return hay.includes(q);
}

const distinct = (xs: string[]): string[] => [...new Set(xs)].sort();

export function BoxesPage(): JSX.Element {
  const user = useUser();
  const [filters, setFilters] = useState<Filters>(() => filtersOf(currentRoute().query));
  const [creating, setCreating] = useState(false);
  const list = usePoll((signal) => api<BoxList>('/v1/boxes', { signal }), LIST_EVERY_MS);
  const boxes = list.data?.boxes ?? [];
  const shown = useMemo(() => boxes.filter((b) => matches(b, filters)).sort((a, b) => b.createdAt.localeCompare(a.createdAt)), [boxes, filters]);
  const stats = useStats(shown.filter((b) => b.status === 'running').map((b) => b.id));
  const now = Date.now();

  const set = (k: keyof Filters, v: string): void => {
    const next = { ...filters, [k]: v };
    setFilters(next);
    keepInHash(next);
  };

  return (
    <Page
      title="Boxes"
      actions={
        <button type="button" class="primary" aria-expanded={creating} data-testid="new-box" onClick={() => setCreating(!creating)}>
          {creating ? 'Close the form' : 'New box'}
        </button>
      }
    >
      {creating ? <CreateForm admin={user.admin} onCancel={() => setCreating(false)} /> : null}
      <div class="filters" role="search" data-testid="box-filters">
        <FilterSelect label="Status" value={filters.status} options={STATUSES} onChange={(v) => set('status', v)} />
        {user.admin ? (
          <FilterSelect label="Owner" value={filters.owner} options={distinct(boxes.map((b) => b.owner))} onChange={(v) => set('owner', v)} />
        ) : null}
        <FilterSelect label="Pool" value={filters.pool} options={distinct(boxes.map((b) => b.pool))} onChange={(v) => set('pool', v)} />
        <label class="filter grow">
          <span class="label">Search</span>
          <input type="search" placeholder="id, image or label" value={filters.q} onInput={(e) => set('q', e.currentTarget.value)} />
        </label>
      </div>
      {/* A failed poll after a good one keeps the list shown, with the error above it. */}
      <ErrorText error={list.error} />
      {list.data === undefined && list.error === undefined ? <p class="loading">Loading…</p> : null}
      {list.data !== undefined ? (
        <div class="table-wrap">
          <table class="boxes" data-testid="box-list">
            <thead>
              <tr>
                <th>Box</th>
                <th>Status</th>
                <th class="wide">Owner</th>
                <th class="wide">Pool</th>
                <th class="wide">Image</th>
                <th class="wide">Age</th>
                <th>Idle</th>
                <th class="wide" title="Processes">
                  Proc.
                </th>
                <th>CPU</th>
                <th>Memory</th>
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((b) => (
                <BoxRow key={b.id} box={b} now={now} stats={stats.get(b.id)} onChanged={list.reload} />
              ))}
            </tbody>
          </table>
          {shown.length === 0 ? (
            <p class="empty muted" data-testid="box-list-empty">
              {boxes.length === 0 ? 'No boxes yet.' : 'No box matches the filters.'}
            </p>
          ) : null}
        </div>
      ) : null}
      <p class="muted count" data-testid="box-count">
        {list.data ? `${shown.length} of ${boxes.length} boxes` : ''}
      </p>
    </Page>
  );
}

/** A select of the values seen ('' for any); the chosen value stays listed even when no box has it now. */
function FilterSelect(props: { label: string; value: string; options: string[]; onChange: (v: string) => void }): JSX.Element {
  const options = props.value && !props.options.includes(props.value) ? [...props.options, props.value] : props.options;
  return (
    <label class="filter">
      <span class="label">{props.label}</span>
      <select value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        <option value="">any</option>
        {options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
    </label>
  );
}

function BoxRow({ box, now, stats, onChanged }: { box: BoxInfo; now: number; stats: BoxStats | undefined; onChanged: () => void }): JSX.Element {
  const action = useAction((fn: () => Promise<unknown>) => fn(), onChanged);
  const labels = Object.entries(box.labels);
  return (
    <>
      <tr data-testid="box-row" data-box-id={box.id}>
        <td class="id">
          <a href={href('boxes', box.id)} class="mono">
            {box.id}
          </a>
          {labels.length > 0 ? (
            <span class="labels muted" title={labels.map(([k, v]) => `${k}=${v}`).join('\n')}>
              {labels.length} label{labels.length > 1 ? 's' : ''}
            </span>
          ) : null}
        </td>
        <td data-testid="box-status">
          <Status status={box.status} />
        </td>
        <td class="wide">{box.owner}</td>
        <td class="wide">{box.pool}</td>
        <td class="wide image mono" title={box.image}>
          {box.image}
        </td>
        <td class="wide" title={box.createdAt}>
          {ago(box.createdAt, now)}
        </td>
        <td title={`last active ${box.lastActive}`} data-label="Idle">
          {ago(box.lastActive, now)}
        </td>
        <td class="wide">{box.processCount}</td>
        <td data-testid="box-cpu" data-label="CPU">
          {box.status === 'running' ? cpuText(stats) : '—'}
        </td>
        <td data-testid="box-memory" data-label="Memory">
          {box.status === 'running' ? memoryText(stats) : '—'}
        </td>
        <td class="row-actions">
          <div class="row-buttons">
            {verbsFor(box.status).map((verb) => (
              <button type="button" key={verb} disabled={action.busy} onClick={() => action.run(() => lifecycle(box.id, verb))}>
                {verb}
              </button>
            ))}
            <ConfirmButton label="Remove" confirm={`Remove ${box.id}?`} danger disabled={action.busy} onConfirm={() => action.run(() => removeBox(box.id))} />
          </div>
        </td>
      </tr>
      {action.error !== undefined ? (
        <tr class="row-error">
          <td colSpan={11}>
            <ErrorText error={action.error} />
          </td>
        </tr>
      ) : null}
    </>
  );
}

// --- Create -------------------------------------------------------------------------------

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "10m", "1h30m", "45s" → ms, as the server's own durations read them; '' → undefined. Throws a message for anything else. */
export function parseDuration(text: string, field: string): number | undefined {
  const t = text.trim();
  if (t === '') return undefined;
  if (/^0+$/.test(t)) return 0;
  const parts = [...t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== t) {
    throw new Error(`${field}: '${text}' is not a duration: write it with a unit, e.g. 30s, 10m, 2h, 1d, 1h30m`);
  }
  return Math.round(parts.reduce((sum, p) => sum + Number(p[1]) * (DURATION_UNITS[p[2] ?? 'ms'] ?? 1), 0));
}

/** "3000, 8080" → ports; throws a message naming a bad one. */
export function parsePorts(text: string): Array<{ containerPort: number }> {
  const out: Array<{ containerPort: number }> = [];
  for (const part of text.split(/[\s,]+/).filter(Boolean)) {
    const n = Number(part);
    if (!/^\d+$/.test(part) || n < 1 || n > 65535) throw new Error(`Ports: '${part}' is not a port number (1-65535)`);
    if (!out.some((p) => p.containerPort === n)) out.push({ containerPort: n });
  }
  return out;
}

/** KEY=VALUE lines → a record; blank lines and # comments skipped; throws a message naming a bad line. */
export function parseEnv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\r$/, '');
    if (line.trim() === '' || line.trimStart().startsWith('#')) return;
    const eq = line.indexOf('=');
    const key = eq > 0 ? line.slice(0, eq).trim() : '';
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new Error(`Environment, line ${i + 1}: write KEY=VALUE (a name of letters, digits and _)`);
    out[key] = line.slice(eq + 1);
  });
  return out;
}

interface CreateFields {
  image: string;
  pool: string;
  policy: string;
  idleTimeout: string;
  maxLifetime: string;
  workspaceId: string;
  ports: string;
  vnc: boolean;
  env: string;
}

/** The create request's body from the form; throws an Error whose message says what to fix. */
export function createBody(f: CreateFields): Record<string, unknown> {
  const image = f.image.trim();
  if (!image) throw new Error('Image: name an image, e.g. sbx-base:latest');
  const body: Record<string, unknown> = { image };
  if (f.pool.trim()) body['pool'] = f.pool.trim();
  if (f.policy) body['policy'] = f.policy;
  const idle = parseDuration(f.idleTimeout, 'Idle timeout');
  if (idle !== undefined) body['idleTimeoutMs'] = idle;
  const life = parseDuration(f.maxLifetime, 'Max lifetime');
  if (life !== undefined) body['maxLifetimeMs'] = life;
  if (f.workspaceId) body['workspaceId'] = f.workspaceId;
  const ports = parsePorts(f.ports);
  if (ports.length > 0) body['ports'] = ports;
  if (f.vnc) body['vnc'] = true;
  const env = parseEnv(f.env);
  if (Object.keys(env).length > 0) body['env'] = env;
  return body;
}

function CreateForm({ admin, onCancel }: { admin: boolean; onCancel: () => void }): JSX.Element {
  const [f, setF] = useState<CreateFields>({
    image: 'sbx-base:latest',
    pool: '',
    policy: '',
    idleTimeout: '',
    maxLifetime: '',
    workspaceId: '',
    ports: '',
    vnc: false,
    env: '',
  });
  // Once: the choices do not change while the form is open.
  const pools = usePoll((signal) => (admin ? api<{ pools: Array<{ name: string }> }>('/v1/pools', { signal }) : Promise.resolve({ pools: [] })), 0);
  const workspaces = usePoll((signal) => api<{ workspaces: Array<{ id: string; name: string }> }>('/v1/workspaces', { signal }), 0);
  const create = useAction(async () => {
    const box = await api<BoxInfo>('/v1/boxes', { method: 'POST', json: createBody(f) });
    navigate('boxes', box.id);
  });
  const set =
    <K extends keyof CreateFields>(k: K) =>
    (v: CreateFields[K]): void =>
      setF((prev) => ({ ...prev, [k]: v }));
  const text = (k: Exclude<keyof CreateFields, 'vnc'>) => ({
    value: f[k],
    onInput: (e: Event) => set(k)((e.currentTarget as HTMLInputElement | HTMLTextAreaElement).value),
  });

  return (
    <form
      class="panel create-box"
      data-testid="create-box"
      aria-label="Create a box"
      onSubmit={(e) => {
        e.preventDefault();
        create.run();
      }}
    >
      <h2>Create a box</h2>
      <div class="form-grid">
        <Field label="Image">
          <input name="image" required autofocus {...text('image')} />
        </Field>
        <Field label="Pool" hint={admin ? undefined : 'optional: the default pool when empty'}>
          {admin ? (
            <select name="pool" value={f.pool} onChange={(e) => set('pool')(e.currentTarget.value)}>
              <option value="">default</option>
              {(pools.data?.pools ?? []).map((p) => (
                <option key={p.name} value={p.name}>
                  {p.name}
                </option>
              ))}
            </select>
          ) : (
            <input name="pool" {...text('pool')} />
          )}
        </Field>
        <Field label="Lifecycle policy">
          <select name="policy" value={f.policy} onChange={(e) => set('policy')(e.currentTarget.value)}>
            <option value="">default (session)</option>
            {POLICIES.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </Field>
        <Field label="Idle timeout" hint="e.g. 10m, 1h30m; empty: as configured">
          <input name="idleTimeout" placeholder="10m" {...text('idleTimeout')} />
        </Field>
        <Field label="Max lifetime" hint="e.g. 2h, 1d; empty: as configured">
          <input name="maxLifetime" placeholder="2h" {...text('maxLifetime')} />
        </Field>
        <Field label="Workspace">
          <select name="workspaceId" value={f.workspaceId} onChange={(e) => set('workspaceId')(e.currentTarget.value)}>
            <option value="">none</option>
            {(workspaces.data?.workspaces ?? []).map((w) => (
              <option key={w.id} value={w.id}>
                {w.name} ({w.id})
              </option>
            ))}
          </select>
        </Field>
        <Field label="Ports" hint="container ports, e.g. 3000, 8080">
          <input name="ports" inputMode="numeric" placeholder="3000, 8080" {...text('ports')} />
        </Field>
        <label class="field check">
          <input type="checkbox" name="vnc" checked={f.vnc} onChange={(e) => set('vnc')(e.currentTarget.checked)} />
          <span>VNC desktop (needs a desktop image, e.g. sbx-desktop)</span>
        </label>
      </div>
      <Field label="Environment" hint="KEY=VALUE, one a line">
        <textarea name="env" rows={3} placeholder="NODE_ENV=development" {...text('env')} />
      </Field>
      <ErrorText error={pools.error ?? workspaces.error} />
      <ErrorText error={create.error} />
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy}>
          {create.busy ? 'Creating…' : 'Create'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** The API's not_found, or the message of anything else, for a box that cannot be shown. */
export function isNotFound(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404;
}
