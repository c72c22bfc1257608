/**
 * Workspaces (`#/workspaces`): the caller's (an admin's: everyone's), each with its usage;
 * create and delete; `#/workspaces/<id>` shows one and its files. Scoping is the API's: a
 * workspace of another owner is not found, here as there.
 */
import type { JSX } from 'preact';
import { useState } from 'preact/hooks';
import { api } from '../api';
import { useUser } from '../app';
import { FileBrowser } from '../files/file-browser';
import { href, navigate } from '../router';
import { ConfirmButton, ErrorText, Field, Page, ago, bytes, useAction, usePoll } from '../ui';
import './workspaces.css';

export interface WorkspaceInfo {
  id: string;
  name: string;
  owner: string;
  node: string;
  labels: Record<string, string>;
  createdAt: string;
  updatedAt: string;
  quotaBytes?: number;
}

export interface WorkspaceUsage {
  bytes: number;
  files: number;
  quotaBytes?: number;
}

const LIST_EVERY_MS = 10_000;

function wsPath(id: string): string {
  return `/v1/workspaces/${encodeURIComponent(id)}`;
}

function Usage({ usage }: { usage: WorkspaceUsage | Error | undefined }): JSX.Element {
  if (usage === undefined) return <span class="muted">…</span>;
  if (usage instanceof Error)
    return (
      <span class="muted" title={usage.message}>
        —
      </span>
    );
  return (
    <span>
      {bytes(usage.bytes)}
      {usage.quotaBytes !== undefined ? ` of ${bytes(usage.quotaBytes)}` : ''} · {usage.files} {usage.files === 1 ? 'file' : 'files'}
    </span>
  );
}

function CreateForm({ admin, onCreated }: { admin: boolean; onCreated: (ws: WorkspaceInfo) => void }): JSX.Element {
  const [name, setName] = useState('');
  const [quotaMiB, setQuotaMiB] = useState('');
  const [owner, setOwner] = useState('');
  const create = useAction(async () => {
    const body: Record<string, unknown> = { name: name.trim() };
    if (quotaMiB.trim()) body['quotaBytes'] = Math.round(Number(quotaMiB) * 1024 * 1024);
    if (admin && owner.trim()) body['owner'] = owner.trim();
    const ws = await api<WorkspaceInfo>('/v1/workspaces', { method: 'POST', json: body });
    setName('');
    setQuotaMiB('');
    onCreated(ws);
  });
  return (
    <form
      class="panel ws-create"
      data-testid="create-workspace"
      onSubmit={(e) => {
        e.preventDefault();
        create.run();
      }}
    >
      <h2>New workspace</h2>
      <div class="form-grid">
        <Field label="Name">
          <input required value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Quota (MiB)" hint="Optional; the server's default when empty.">
          <input type="number" min="1" step="any" inputMode="decimal" value={quotaMiB} onInput={(e) => setQuotaMiB(e.currentTarget.value)} />
        </Field>
        {admin ? (
          <Field label="Owner" hint="Optional; yours when empty.">
            <input value={owner} onInput={(e) => setOwner(e.currentTarget.value)} />
          </Field>
        ) : null}
      </div>
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy || name.trim() === ''}>
          {create.busy ? 'Creating…' : 'Create workspace'}
        </button>
      </div>
      <ErrorText error={create.error} />
    </form>
  );
}

export function WorkspacesPage(): JSX.Element {
  const user = useUser();
  const [creating, setCreating] = useState(false);
  const list = usePoll(async (signal) => {
    const { workspaces } = await api<{ workspaces: WorkspaceInfo[] }>('/v1/workspaces', { signal });
    // Usage per workspace; one it cannot tell (its node away) shows a dash, not an error for the page.
    const usage = await Promise.all(
      workspaces.map((w) =>
        api<WorkspaceUsage>(`${wsPath(w.id)}/usage`, { signal }).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err)))),
      ),
    );
    return workspaces.map((w, i) => ({ ws: w, usage: usage[i] }));
  }, LIST_EVERY_MS);
  const remove = useAction((id: string) => api(wsPath(id), { method: 'DELETE' }), list.reload);
  const rows = [...(list.data ?? [])].sort((a, b) => b.ws.createdAt.localeCompare(a.ws.createdAt));

  return (
    <Page
      title="Workspaces"
      actions={
        <button type="button" class={creating ? '' : 'primary'} aria-expanded={creating} onClick={() => setCreating(!creating)}>
          {creating ? 'Close' : 'New workspace'}
        </button>
      }
    >
      {creating ? (
        <CreateForm
          admin={user.admin}
          onCreated={() => {
            setCreating(false);
            list.reload();
          }}
        />
      ) : null}
      <ErrorText error={list.error} />
      <ErrorText error={remove.error} />
      {list.data ? (
        <div class="table-wrap">
          <table data-testid="workspace-list">
            <thead>
              <tr>
                <th>Name</th>
                <th>ID</th>
                <th>Owner</th>
                <th>Usage</th>
                <th>Created</th>
                <th>
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.length === 0 ? (
                <tr>
                  <td colSpan={6} class="muted">
                    No workspaces yet.
                  </td>
                </tr>
              ) : null}
              {rows.map(({ ws, usage }) => (
                <tr key={ws.id} data-testid="workspace-row" data-id={ws.id}>
                  <td class="wrap">
                    <a href={href('workspaces', ws.id)}>{ws.name}</a>
                  </td>
                  <td class="mono">{ws.id}</td>
                  <td>{ws.owner}</td>
                  <td>
                    <Usage usage={usage} />
                  </td>
                  <td title={ws.createdAt}>{ago(ws.createdAt)} ago</td>
                  <td>
                    <ConfirmButton
                      label="Delete"
                      confirm={`Delete workspace ${ws.name} and its files?`}
                      danger
                      disabled={remove.busy}
                      onConfirm={() => remove.run(ws.id)}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : list.error ? null : (
        <p class="loading">Loading…</p>
      )}
    </Page>
  );
}

export function WorkspacePage({ id }: { id: string }): JSX.Element {
  const info = usePoll(
    async (signal) => {
      const [ws, usage] = await Promise.all([api<WorkspaceInfo>(wsPath(id), { signal }), api<WorkspaceUsage>(`${wsPath(id)}/usage`, { signal })]);
      return { ws, usage };
    },
    LIST_EVERY_MS,
    [id],
  );
  const remove = useAction(
    () => api(wsPath(id), { method: 'DELETE' }),
    () => navigate('workspaces'),
  );
  const ws = info.data?.ws;
  return (
    <Page
      title={ws ? `Workspace ${ws.name}` : `Workspace ${id}`}
      actions={
        <>
          <a href={href('workspaces')}>All workspaces</a>
          {ws ? (
            <ConfirmButton label="Delete" confirm={`Delete workspace ${ws.name} and its files?`} danger disabled={remove.busy} onConfirm={() => remove.run()} />
          ) : null}
        </>
      }
    >
      <ErrorText error={remove.error} />
      {/* Once it was shown, a failed refresh keeps the page and says why; before, the API's message is the page. */}
      <ErrorText error={info.error} />
      {ws && info.data ? (
        <>
          <dl class="info panel" data-testid="workspace-info">
            <dt>ID</dt>
            <dd class="mono">{ws.id}</dd>
            <dt>Owner</dt>
            <dd>{ws.owner}</dd>
            <dt>Node</dt>
            <dd>{ws.node}</dd>
            <dt>Usage</dt>
            <dd data-testid="workspace-usage">
              <Usage usage={info.data.usage} />
            </dd>
            <dt>Created</dt>
            <dd title={ws.createdAt}>{ago(ws.createdAt)} ago</dd>
            {Object.keys(ws.labels).length > 0 ? (
              <>
                <dt>Labels</dt>
                <dd class="mono">
                  {Object.entries(ws.labels)
                    .map(([k, v]) => `${k}=${v}`)
                    .join(', ')}
                </dd>
              </>
            ) : null}
          </dl>
          <h2>Files</h2>
          <FileBrowser source={{ base: `${wsPath(id)}/files`, tarBase: `${wsPath(id)}/tar`, rootLabel: ws.name, start: '/' }} />
        </>
      ) : info.error ? null : (
        <p class="loading">Loading…</p>
      )}
    </Page>
  );
}
