/**
 * API keys (admin): the list (never a secret: the API has only their hashes), a new key whose
 * secret is shown once, in this page's memory only, and revoking one. A user key gets the API's
 * forbidden message here: the console asks the API and shows what it says.
 */
import type { JSX } from 'preact';
import { useState } from 'preact/hooks';
import { api } from '../api';
import { ConfirmButton, ErrorText, Field, Page, ago, useAction, usePoll } from '../ui';
import { ListTable, refusedPage } from './admin-ui';
import './admin.css';

interface KeyInfo {
  id: string;
  name: string;
  role: 'admin' | 'user';
  owner: string;
  createdAt: string;
}
interface CreatedKey extends KeyInfo {
  key: string;
  e2bKey: string;
}

function NewSecret({ created, onDone }: { created: CreatedKey; onDone: () => void }): JSX.Element {
  const [copied, setCopied] = useState<string | undefined>(undefined);
  const copy = (): void => {
    navigator.clipboard.writeText(created.key).then(
      () => setCopied('Copied.'),
      () => setCopied('Copying failed: select the key and copy it yourself.'),
    );
  };
  return (
    <div class="panel secret" role="status" data-testid="new-key">
      <h2>Key “{created.name}” created</h2>
      <p class="warn-text">
        <strong>Copy it now: you will not see it again.</strong> The server keeps only its hash.
      </p>
      <div class="row">
        <code class="mono secret-value" data-testid="new-key-secret">
          {created.key}
        </code>
        <button type="button" class="primary" onClick={copy}>
          Copy
        </button>
        <button type="button" onClick={onDone}>
          Done
        </button>
      </div>
      {copied ? <p class="hint">{copied}</p> : null}
    </div>
  );
}

export function KeysPage(): JSX.Element {
  const keys = usePoll((signal) => api<{ keys: KeyInfo[] }>('/v1/keys', { signal }), 0);
  const [name, setName] = useState('');
  const [role, setRole] = useState<'user' | 'admin'>('user');
  const [owner, setOwner] = useState('');
  const [created, setCreated] = useState<CreatedKey | undefined>(undefined);
  const create = useAction(async () => {
    const body: Record<string, string> = { name: name.trim(), role };
    if (role === 'user' && owner.trim()) body['owner'] = owner.trim();
    setCreated(await api<CreatedKey>('/v1/keys', { method: 'POST', json: body }));
    setName('');
    setOwner('');
  }, keys.reload);
  const revoke = useAction((id: string) => api(`/v1/keys/${encodeURIComponent(id)}`, { method: 'DELETE' }), keys.reload);

  const refused = refusedPage('Keys', keys);
  if (refused) return refused;
  return (
    <Page title="Keys">
      {created ? <NewSecret created={created} onDone={() => setCreated(undefined)} /> : null}
      <form
        class="panel"
        aria-label="Create a key"
        onSubmit={(e) => {
          e.preventDefault();
          create.run();
        }}
      >
        <h2>Create a key</h2>
        <div class="form-grid">
          <Field label="Name">
            <input name="keyName" required maxLength={128} value={name} onInput={(e) => setName(e.currentTarget.value)} />
          </Field>
          <Field label="Role">
            <select name="role" value={role} onChange={(e) => setRole(e.currentTarget.value as 'user' | 'admin')}>
              <option value="user">user: its own boxes and workspaces</option>
              <option value="admin">admin: everything</option>
            </select>
          </Field>
          {role === 'user' ? (
            <Field label="Owner" hint="the owner its boxes get; default its name">
              <input name="owner" value={owner} placeholder={name || 'owner'} onInput={(e) => setOwner(e.currentTarget.value)} />
            </Field>
          ) : null}
        </div>
        <div class="row form-actions">
          <button type="submit" class="primary" disabled={create.busy || name.trim() === ''}>
            {create.busy ? 'Creating…' : 'Create key'}
          </button>
        </div>
        <ErrorText error={create.error} />
      </form>
      <ErrorText error={revoke.error ?? keys.error} />
      <ListTable headers={['Name', 'Id', 'Role', 'Owner', 'Created']} loaded={keys.data !== undefined} empty={keys.data?.keys.length === 0 && 'No keys.'}>
        {keys.data?.keys.map((k) => (
          <tr key={k.id} data-testid="key-row" data-key-name={k.name}>
            <td>{k.name}</td>
            <td class="mono">{k.id}</td>
            <td>{k.role}</td>
            <td>{k.owner}</td>
            <td title={k.createdAt}>{ago(k.createdAt)} ago</td>
            <td>
              <ConfirmButton
                label="Revoke"
                danger
                confirm={`Revoke ${k.name}? It stops working at once.`}
                disabled={revoke.busy}
                onConfirm={() => revoke.run(k.id)}
              />
            </td>
          </tr>
        ))}
      </ListTable>
    </Page>
  );
}
