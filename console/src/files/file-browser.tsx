/**
 * One file browser for a box's filesystem and a workspace's tree: both APIs answer the same
 * routes under their own base (`GET …?list`, `GET` the bytes, `PUT` the raw body, `DELETE`
 * `?recursive`, `POST {"op":"mkdir"}`; routes-box-files.ts, routes-workspaces.ts), so a source
 * is only its base URL and the places worth a shortcut.
 *
 * Paths here always start with `/`: a box's are its real absolute paths, a workspace's are
 * relative to its root (`/` is the root). The directory shown is in the route's query
 * (`#/boxes/<id>/files?path=/tmp`), so the back button and a copied link work.
 *
 * Listing runs a command in a box (box-fs.ts), so nothing here polls it: it is read when
 * opened, on Refresh and after a change this page made.
 */
import type { JSX } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, encodePath, request } from '../api';
import { useRoute } from '../router';
import { ConfirmButton, ErrorText, ago, bytes, useAction, usePoll } from '../ui';
import { download, readText, saveBlob, upload } from './transfer';
import './files.css';

/** The largest file the console opens for viewing and editing; larger ones are downloaded. */
export const MAX_VIEW_BYTES = 1024 * 1024;

export interface FileSource {
  /** The files route of the root: `/v1/boxes/<id>/files`, `/v1/workspaces/<id>/files`. */
  base: string;
  /** The tar route of the root, when the source has one (a directory is then downloaded as a tar). */
  tarBase?: string;
  /** What the root is called in the breadcrumbs. */
  rootLabel: string;
  /** The directory shown when the route names none. */
  start: string;
  /** Shortcuts (a box's root and its workspace mount). */
  places?: Array<{ label: string; path: string }>;
}

export interface DirEntry {
  name: string;
  isDir: boolean;
  isSymlink: boolean;
  size: number;
  mode: number;
  mtime: string;
}

interface Transfer {
  id: number;
  kind: 'upload' | 'download';
  name: string;
  loaded: number;
  total: number | undefined;
  state: 'running' | 'done' | 'failed';
  error?: unknown;
}

type Viewer =
  | { path: string; name: string; mode: number; state: 'loading' }
  | { path: string; name: string; mode: number; state: 'text'; saved: string; text: string }
  | { path: string; name: string; mode: number; state: 'refused'; error: unknown };

/** `/a/./b/../c/` → `/a/c`: a typed path, resolved lexically as the box does (box-path.ts). */
export function normalPath(input: string): string {
  const out: string[] = [];
  for (const part of input.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') out.pop();
    else out.push(part);
  }
  return `/${out.join('/')}`;
}

function join(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

function urlOf(base: string, path: string): string {
  return path === '/' ? base : base + encodePath(path);
}

/** The console route of this page showing directory `path`. */
function hrefOf(path: string): string {
  const [route = ''] = location.hash.replace(/^#\/?/, '').split('?', 1);
  return `#/${route}?path=${encodeURIComponent(path)}`;
}

/** `0o644` → `644`, as the write route's `?mode` takes it. */
function octal(mode: number): string {
  return (mode & 0o7777).toString(8).padStart(3, '0');
}

function tooLarge(name: string, size: number): Error {
  return new Error(`${name} is ${bytes(size)}: the console views and edits files up to ${bytes(MAX_VIEW_BYTES)}. Download it instead.`);
}

let transferSeq = 0;

export function FileBrowser({ source }: { source: FileSource }): JSX.Element {
  const route = useRoute();
  const dir = normalPath(route.query.get('path') ?? source.start);
  const listing = usePoll((signal) => api<{ entries: DirEntry[] }>(`${urlOf(source.base, dir)}?list=true`, { signal }), 0, [source.base, dir]);
  const [transfers, setTransfers] = useState<Transfer[]>([]);
  const [viewer, setViewer] = useState<Viewer | undefined>(undefined);
  const [over, setOver] = useState(false);
  const [goTo, setGoTo] = useState(dir);
  const [folder, setFolder] = useState('');
  useEffect(() => setGoTo(dir), [dir]);

  const track = (t: Transfer): ((patch: Partial<Transfer>) => void) => {
    // The running ones and the last few that ended stay listed.
    setTransfers((all) => {
      const ended = all.filter((x) => x.state !== 'running').slice(-5);
      return [...all.filter((x) => x.state === 'running' || ended.includes(x)), t];
    });
    return (patch) => setTransfers((all) => all.map((x) => (x.id === t.id ? { ...x, ...patch } : x)));
  };

  const uploadAll = async (files: File[], into: string): Promise<void> => {
    for (const file of files) {
      const update = track({ id: ++transferSeq, kind: 'upload', name: file.name, loaded: 0, total: file.size, state: 'running' });
      try {
        await upload(urlOf(source.base, join(into, file.name)), file, (loaded, total) => update({ loaded, total }));
        update({ state: 'done' });
      } catch (err) {
        update({ state: 'failed', error: err });
      }
    }
    listing.reload();
  };

  const downloadEntry = async (e: DirEntry): Promise<void> => {
    const path = join(dir, e.name);
    const asTar = e.isDir && source.tarBase !== undefined;
    const name = asTar ? `${e.name}.tar` : e.name;
    const update = track({ id: ++transferSeq, kind: 'download', name, loaded: 0, total: asTar ? undefined : e.size, state: 'running' });
    try {
      const url = asTar && source.tarBase ? `${source.tarBase}${encodePath(path)}` : urlOf(source.base, path);
      const blob = await download(url, asTar ? undefined : e.size, (loaded, total) => update({ loaded, total }));
      update({ state: 'done', loaded: blob.size, total: blob.size });
      saveBlob(blob, name);
    } catch (err) {
      update({ state: 'failed', error: err });
    }
  };

  const view = async (e: DirEntry): Promise<void> => {
    const path = join(dir, e.name);
    const base = { path, name: e.name, mode: e.mode };
    if (e.size > MAX_VIEW_BYTES) {
      setViewer({ ...base, state: 'refused', error: tooLarge(e.name, e.size) });
      return;
    }
    setViewer({ ...base, state: 'loading' });
    try {
      const got = await readText(urlOf(source.base, path), MAX_VIEW_BYTES);
      if ('text' in got) setViewer({ ...base, state: 'text', text: got.text, saved: got.text });
      else if ('tooLarge' in got) setViewer({ ...base, state: 'refused', error: tooLarge(e.name, got.tooLarge) });
      else setViewer({ ...base, state: 'refused', error: new Error(`${e.name} is not UTF-8 text: download it instead.`) });
    } catch (err) {
      setViewer({ ...base, state: 'refused', error: err });
    }
  };

  const save = useAction(
    async (v: Extract<Viewer, { state: 'text' }>) => {
      await request(`${urlOf(source.base, v.path)}?mode=${octal(v.mode)}`, {
        method: 'PUT',
        body: new Blob([v.text]),
        headers: { 'Content-Type': 'application/octet-stream' },
      });
      setViewer((now) => (now && now.path === v.path && now.state === 'text' ? { ...now, saved: v.text } : now));
    },
    () => listing.reload(),
  );
  const remove = useAction(
    (e: DirEntry) => request(`${urlOf(source.base, join(dir, e.name))}${e.isDir ? '?recursive=true' : ''}`, { method: 'DELETE' }),
    () => listing.reload(),
  );
  const mkdir = useAction(
    (name: string) => api(urlOf(source.base, normalPath(join(dir, name))), { method: 'POST', json: { op: 'mkdir' } }),
    () => {
      setFolder('');
      listing.reload();
    },
  );

  const crumbs = dir === '/' ? [] : dir.slice(1).split('/');
  const entries = [...(listing.data?.entries ?? [])].sort((a, b) => (a.isDir === b.isDir ? a.name.localeCompare(b.name) : a.isDir ? -1 : 1));

  return (
    <div
      class={`files dropzone ${over ? 'over' : ''}`}
      data-testid="dropzone"
      onDragOver={(e) => {
        e.preventDefault();
        if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
        setOver(true);
      }}
      onDragLeave={() => setOver(false)}
      onDrop={(e) => {
        e.preventDefault();
        setOver(false);
        const files = [...(e.dataTransfer?.files ?? [])];
        if (files.length > 0) void uploadAll(files, dir);
      }}
    >
      <div class="files-bar">
        <nav class="crumbs" aria-label="Path" data-testid="breadcrumbs">
          <a href={hrefOf('/')} aria-current={dir === '/' ? 'location' : undefined}>
            {source.rootLabel}
          </a>
          {crumbs.map((c, i) => {
            const path = `/${crumbs.slice(0, i + 1).join('/')}`;
            return (
              <span key={path}>
                <span class="sep" aria-hidden="true">
                  /
                </span>
                <a href={hrefOf(path)} aria-current={path === dir ? 'location' : undefined}>
                  {c}
                </a>
              </span>
            );
          })}
        </nav>
        {source.places && source.places.length > 0 ? (
          <div class="places">
            {source.places.map((p) => (
              <a key={p.path} class="place" href={hrefOf(p.path)}>
                {p.label}
              </a>
            ))}
          </div>
        ) : null}
      </div>

      <div class="files-tools">
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            location.hash = hrefOf(normalPath(goTo));
          }}
        >
          <input aria-label="Go to path" data-testid="goto" class="mono" value={goTo} onInput={(e) => setGoTo(e.currentTarget.value)} />
          <button type="submit">Go</button>
          <button type="button" onClick={listing.reload}>
            Refresh
          </button>
        </form>
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            if (folder.trim()) mkdir.run(folder.trim());
          }}
        >
          <input aria-label="New folder name" placeholder="new folder" value={folder} onInput={(e) => setFolder(e.currentTarget.value)} />
          <button type="submit" disabled={mkdir.busy || folder.trim() === ''}>
            New folder
          </button>
        </form>
        <label class="upload-button">
          Upload files…
          <input
            type="file"
            multiple
            class="visually-hidden"
            data-testid="upload-input"
            onChange={(e) => {
              const files = [...(e.currentTarget.files ?? [])];
              e.currentTarget.value = '';
              if (files.length > 0) void uploadAll(files, dir);
            }}
          />
        </label>
        <span class="muted drop-hint">or drop files here</span>
      </div>

      <ErrorText error={mkdir.error ?? remove.error} />

      {transfers.length > 0 ? (
        <ul class="transfers" data-testid="transfers" aria-label="Transfers">
          {transfers.map((t) => (
            <li key={t.id} data-testid="transfer" data-state={t.state} data-name={t.name}>
              <span class="t-name">
                {t.kind === 'upload' ? '↑' : '↓'} {t.name}
              </span>
              <progress
                data-testid={`${t.kind}-progress`}
                max={t.total ?? undefined}
                value={t.total === undefined && t.state === 'running' ? undefined : t.loaded}
                aria-label={`${t.kind === 'upload' ? 'Uploading' : 'Downloading'} ${t.name}`}
              />
              <span class="t-size">
                {bytes(t.loaded)}
                {t.total !== undefined ? ` of ${bytes(t.total)}` : ''}
              </span>
              <span class="t-state">{t.state === 'running' ? '…' : t.state}</span>
              {t.state === 'failed' ? <ErrorText error={t.error} /> : null}
            </li>
          ))}
        </ul>
      ) : null}

      {viewer ? (
        <section class="viewer panel" aria-label={`File ${viewer.path}`} data-testid="viewer">
          <header class="row">
            <strong class="mono">{viewer.path}</strong>
            <span class="spacer" />
            {viewer.state === 'text' ? (
              <>
                <span class="muted" data-testid="save-state">
                  {save.busy ? 'Saving…' : viewer.text === viewer.saved ? 'Saved' : 'Changed'}
                </span>
                <button type="button" class="primary" data-testid="save" disabled={save.busy || viewer.text === viewer.saved} onClick={() => save.run(viewer)}>
                  Save
                </button>
              </>
            ) : null}
            <button type="button" onClick={() => setViewer(undefined)}>
              Close
            </button>
          </header>
          {viewer.state === 'loading' ? <p class="muted">Loading…</p> : null}
          {viewer.state === 'refused' ? <ErrorText error={viewer.error} /> : null}
          {viewer.state === 'text' ? (
            <>
              <ErrorText error={save.error} />
              <textarea
                data-testid="editor"
                aria-label={`Contents of ${viewer.name}`}
                spellcheck={false}
                rows={Math.min(30, Math.max(8, viewer.text.split('\n').length + 1))}
                value={viewer.text}
                onInput={(e) => {
                  const text = e.currentTarget.value;
                  setViewer((now) => (now && now.state === 'text' ? { ...now, text } : now));
                }}
              />
            </>
          ) : null}
        </section>
      ) : null}

      <ErrorText error={listing.error} />
      {listing.data ? (
        <div class="table-wrap">
          <table data-testid="file-list">
            <thead>
              <tr>
                <th>Name</th>
                <th>Size</th>
                <th class="narrow-hide">Modified</th>
                <th class="narrow-hide">Mode</th>
                <th>
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {dir !== '/' ? (
                <tr>
                  <td colSpan={5}>
                    <a href={hrefOf(normalPath(`${dir}/..`))}>.. (up)</a>
                  </td>
                </tr>
              ) : null}
              {entries.length === 0 ? (
                <tr>
                  <td colSpan={5} class="muted">
                    Empty. Drop files here or use Upload files.
                  </td>
                </tr>
              ) : null}
              {entries.map((e) => (
                <tr key={e.name} data-testid="file-row" data-name={e.name}>
                  <td class="wrap name">
                    {e.isDir || e.isSymlink ? (
                      <a href={hrefOf(join(dir, e.name))} title={e.isSymlink ? 'a symbolic link' : undefined}>
                        {e.name}
                        {e.isDir ? '/' : ' →'}
                      </a>
                    ) : (
                      <span>{e.name}</span>
                    )}
                  </td>
                  <td>{e.isDir ? '—' : bytes(e.size)}</td>
                  <td class="narrow-hide" title={e.mtime}>
                    {ago(e.mtime)} ago
                  </td>
                  <td class="mono narrow-hide">{octal(e.mode)}</td>
                  <td>
                    <div class="file-actions">
                      {!e.isDir ? (
                        <button type="button" aria-label={`View ${e.name}`} onClick={() => void view(e)}>
                          View
                        </button>
                      ) : null}
                      {!e.isDir || source.tarBase ? (
                        <button type="button" aria-label={`Download ${e.name}${e.isDir ? ' as tar' : ''}`} onClick={() => void downloadEntry(e)}>
                          Download
                        </button>
                      ) : null}
                      <ConfirmButton
                        label="Delete"
                        confirm={e.isDir ? `Delete ${e.name} and all it holds?` : `Delete ${e.name}?`}
                        danger
                        disabled={remove.busy}
                        onConfirm={() => remove.run(e)}
                      />
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : listing.error ? null : (
        <p class="muted">Loading…</p>
      )}
    </div>
  );
}
