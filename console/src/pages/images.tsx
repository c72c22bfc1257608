/**
 * A pool's images: the list with size and age, remove (confirmed), and pull with the engine's
 * progress as the API streams it (POST /v1/images/pull answers Server-Sent Events: `progress`
 * per layer line, then `done` or `error`). The API allows these to admin keys only; a user key
 * sees its forbidden message.
 */
import type { JSX } from 'preact';
import { useState } from 'preact/hooks';
import { ApiError, api, request } from '../api';
import { ConfirmButton, ErrorText, Field, Page, ago, bytes, useAction, usePoll } from '../ui';
import { ListTable, refusedPage } from './admin-ui';
import './admin.css';

interface ImageInfo {
  id: string;
  tags: string[];
  sizeBytes: number;
  createdAt: string;
}
interface PullProgress {
  id?: string;
  status: string;
  current?: number;
  total?: number;
}
interface Layer {
  id: string;
  status: string;
  current?: number;
  total?: number;
}
interface PullState {
  ref: string;
  layers: Layer[];
  /** The last whole-image line ("Pulling from …", "Digest: …"). */
  status: string;
  done: boolean;
  error?: unknown;
}

/** Server-Sent Events from a fetch body: each event's name and parsed data, in order. */
async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<{ event: string; data: unknown }> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
      }
      if (data.length > 0) yield { event, data: JSON.parse(data.join('\n')) as unknown };
    }
  }
}

function errorOfEvent(data: unknown): ApiError {
  const e = (data as { error?: { code?: string; message?: string; details?: Record<string, unknown> } }).error;
  return new ApiError(500, e?.code ?? 'internal', e?.message ?? 'the pull failed', e?.details);
}

function PullProgressView({ pull }: { pull: PullState }): JSX.Element {
  const sized = pull.layers.filter((l) => l.total !== undefined && l.total > 0);
  const total = sized.reduce((s, l) => s + (l.total ?? 0), 0);
  const current = sized.reduce((s, l) => s + Math.min(l.current ?? 0, l.total ?? 0), 0);
  return (
    <div class="panel" data-testid="pull-progress" aria-live="polite">
      <div class="row">
        <strong>{pull.ref}</strong>
        {total > 0 ? (
          <>
            <progress max={total} value={current} aria-label="Downloaded" />
            <span data-testid="pull-bytes">
              {bytes(current)} of {bytes(total)}
            </span>
          </>
        ) : null}
        <span class="hint">{pull.done ? (pull.error ? 'failed' : 'done') : pull.status || 'starting…'}</span>
      </div>
      {pull.layers.length > 0 ? (
        <ul class="layers">
          {pull.layers.map((l) => (
            <li key={l.id} data-testid="pull-layer">
              <span class="mono">{l.id}</span> {l.status}
              {l.total ? ` ${bytes(l.current ?? 0)} / ${bytes(l.total)}` : ''}
            </li>
          ))}
        </ul>
      ) : null}
      {pull.done && !pull.error ? <p data-testid="pull-done">Pulled {pull.ref}.</p> : null}
      <ErrorText error={pull.error} />
    </div>
  );
}

export function ImagesPage(): JSX.Element {
  const [pool, setPool] = useState('');
  const pools = usePoll((signal) => api<{ pools: Array<{ name: string }> }>('/v1/pools', { signal }), 0);
  const images = usePoll(
    (signal) => api<{ pool: string; images: ImageInfo[] }>(`/v1/images${pool ? `?pool=${encodeURIComponent(pool)}` : ''}`, { signal }),
    15_000,
    [pool],
  );
  const [ref, setRef] = useState('');
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const [pull, setPull] = useState<PullState | undefined>(undefined);
  const remove = useAction(
    (image: string) =>
      api(`/v1/images?ref=${encodeURIComponent(image)}${images.data ? `&pool=${encodeURIComponent(images.data.pool)}` : ''}`, { method: 'DELETE' }),
    images.reload,
  );

  const startPull = useAction(async () => {
    const wanted = ref.trim();
    const state: PullState = { ref: wanted, layers: [], status: '', done: false };
    const layers = new Map<string, Layer>();
    const show = (): void => setPull({ ...state, layers: [...layers.values()] });
    show();
    try {
      const res = await request('/v1/images/pull', {
        method: 'POST',
        json: {
          ref: wanted,
          ...(pool ? { pool } : {}),
          ...(username && password ? { auth: { username, password } } : {}),
        },
      });
      if (!res.body) throw new Error('the server sent no progress');
      for await (const { event, data } of sseEvents(res.body)) {
        if (event === 'progress') {
          const p = data as PullProgress;
          if (p.id && p.id !== wanted && !p.status.startsWith('Pulling from')) {
            const layer: Layer = { id: p.id, status: p.status };
            // The engine's "Download complete" / "Pull complete" lines carry no sizes: keep the last known.
            const known = layers.get(p.id);
            layer.current = p.current ?? (/complete|exists/i.test(p.status) ? known?.total : known?.current);
            layer.total = p.total ?? known?.total;
            layers.set(p.id, layer);
          } else state.status = p.status;
        } else if (event === 'error') state.error = errorOfEvent(data);
        else if (event === 'done') state.status = 'done';
        show();
      }
    } catch (err) {
      state.error = err;
    }
    state.done = true;
    show();
    images.reload();
  });

  const refused = refusedPage('Images', images);
  if (refused) return refused;
  return (
    <Page
      title="Images"
      actions={
        pools.data && pools.data.pools.length > 1 ? (
          <label class="row">
            Pool
            <select value={pool || images.data?.pool} onChange={(e) => setPool(e.currentTarget.value)}>
              {pools.data.pools.map((p) => (
                <option key={p.name} value={p.name}>
                  {p.name}
                </option>
              ))}
            </select>
          </label>
        ) : null
      }
    >
      <form
        class="panel"
        aria-label="Pull an image"
        onSubmit={(e) => {
          e.preventDefault();
          startPull.run();
        }}
      >
        <h2>Pull an image{images.data ? ` to pool ${images.data.pool}` : ''}</h2>
        <div class="form-grid">
          <Field label="Image reference">
            <input name="ref" required placeholder="registry/name:tag" value={ref} onInput={(e) => setRef(e.currentTarget.value)} />
          </Field>
          <Field label="Registry user (private registry)">
            <input name="username" autocomplete="off" value={username} onInput={(e) => setUsername(e.currentTarget.value)} />
          </Field>
          <Field label="Registry password (private registry)">
            <input name="password" type="password" autocomplete="off" value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
          </Field>
        </div>
        <div class="row form-actions">
          <button type="submit" class="primary" disabled={startPull.busy || ref.trim() === ''}>
            {startPull.busy ? 'Pulling…' : 'Pull'}
          </button>
        </div>
        <ErrorText error={startPull.error} />
      </form>
      {pull ? <PullProgressView pull={pull} /> : null}
      <ErrorText error={remove.error ?? images.error} />
      <ListTable
        headers={['Image', 'Id', 'Size', 'Age']}
        loaded={images.data !== undefined}
        empty={images.data?.images.length === 0 && 'No images on this pool.'}
      >
        {images.data?.images.map((img) => {
          const name = img.tags[0] ?? img.id;
          return (
            <tr key={img.id} data-testid="image-row" data-image={img.tags.join(' ')}>
              <td class="wrap image-name">{img.tags.length > 0 ? img.tags.join(', ') : <span class="hint">untagged</span>}</td>
              <td class="mono" title={img.id}>
                {img.id.replace(/^sha256:/, '').slice(0, 12)}
              </td>
              <td>{bytes(img.sizeBytes)}</td>
              <td title={img.createdAt}>{ago(img.createdAt)}</td>
              <td>
                <ConfirmButton label="Delete" danger confirm={`Delete ${name}?`} disabled={remove.busy} onConfirm={() => remove.run(name)} />
              </td>
            </tr>
          );
        })}
      </ListTable>
    </Page>
  );
}
