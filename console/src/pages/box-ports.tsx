/**
 * The Ports tab: the box's published ports, and signed, expiring links to any port of it through
 * the server's proxy (`POST /v1/boxes/:id/proxy-url` with signed: true). A browser sends no
 * Authorization header, so a link carries a port access token; the proxy swaps it for a cookie
 * scoped to the box's port on the first visit (src/server/port-auth.ts). Anyone with a link
 * reaches that port until it expires, or until the key that signed it is revoked.
 *
 * Signing is a use of the box (it wakes a paused one), so links are made only when asked for.
 */
import type { JSX } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, encodePath } from '../api';
import type { BoxInfo } from '../types';
import { ErrorText, Field, ago, useAction } from '../ui';
import './box-ports.css';

/** The lifetimes offered for a link; the API takes 1 s to 24 h. */
export const TTL_CHOICES = [
  { ms: 60_000, label: '1 minute' },
  { ms: 15 * 60_000, label: '15 minutes' },
  { ms: 3_600_000, label: '1 hour' },
  { ms: 8 * 3_600_000, label: '8 hours' },
  { ms: 24 * 3_600_000, label: '24 hours' },
] as const;
const DEFAULT_TTL_MS = 3_600_000;

interface SignedUrl {
  url: string;
  expiresAt: string;
}

interface Link extends SignedUrl {
  port: number;
  path: string;
}

function CopyButton({ text }: { text: string }): JSX.Element {
  const [done, setDone] = useState<'copied' | 'failed' | undefined>(undefined);
  return (
    <button
      type="button"
      data-testid="share-copy"
      onClick={() =>
        navigator.clipboard.writeText(text).then(
          () => setDone('copied'),
          () => setDone('failed'),
        )
      }
    >
      {done === 'copied' ? 'Copied' : done === 'failed' ? 'Copy failed: select the URL' : 'Copy'}
    </button>
  );
}

function LinkRow({ link, now }: { link: Link; now: number }): JSX.Element {
  const expired = Date.parse(link.expiresAt) <= now;
  return (
    <li class="share-link" data-testid="share-link">
      <div class="row">
        <strong>
          port {link.port}
          {link.path !== '/' ? ` ${link.path}` : ''}
        </strong>
        <span class="muted" data-testid="share-expires" data-expires-at={link.expiresAt} title={link.expiresAt}>
          {expired ? 'expired' : 'expires'} {new Date(link.expiresAt).toLocaleString()} (
          {expired ? `${ago(link.expiresAt, now)} ago` : `in ${ago(link.expiresAt, now)}`})
        </span>
      </div>
      <div class="row">
        <input
          class="share-url mono"
          readOnly
          value={link.url}
          aria-label={`Link to port ${link.port}`}
          data-testid="share-url"
          onFocus={(e) => e.currentTarget.select()}
        />
        <CopyButton text={link.url} />
        <a href={link.url} target="_blank" rel="noopener noreferrer" data-testid="share-open">
          Open ↗
        </a>
      </div>
    </li>
  );
}

export function PortsTab({ box }: { box: BoxInfo }): JSX.Element {
  const [port, setPort] = useState(String(box.ports[0]?.containerPort ?? ''));
  const [path, setPath] = useState('/');
  const [ttlMs, setTtlMs] = useState(DEFAULT_TTL_MS);
  const [links, setLinks] = useState<Link[]>([]);
  // The links' "expires in" counts down, and an expired one says so.
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (links.length === 0) return;
    const timer = setInterval(() => setNow(Date.now()), 5000);
    return () => clearInterval(timer);
  }, [links.length]);

  const sign = useAction(async (p: number) => {
    const got = await api<SignedUrl>(`/v1/boxes/${encodePath(box.id)}/proxy-url`, {
      method: 'POST',
      json: { port: p, path: path || '/', signed: true, ttlMs },
    });
    setLinks((list) => [{ ...got, port: p, path: path || '/' }, ...list]);
    setNow(Date.now());
  });

  return (
    <div class="ports-tab">
      <h2>Published ports</h2>
      {box.ports.length === 0 ? (
        <p class="muted" data-testid="ports-none">
          No port is published on the host. Every port of the box is still reachable through the proxy with a link below.
        </p>
      ) : (
        <div class="table-wrap">
          <table data-testid="ports-published">
            <thead>
              <tr>
                <th>Port in the box</th>
                <th>On the host</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {box.ports.map((p) => (
                <tr key={`${p.containerPort}/${p.protocol}`} data-testid="port-row">
                  <td>
                    {p.containerPort}/{p.protocol}
                  </td>
                  <td class="mono">
                    {p.hostIp}:{p.hostPort}
                  </td>
                  <td>
                    {p.protocol === 'tcp' ? (
                      <button type="button" disabled={sign.busy} data-testid={`port-link-${p.containerPort}`} onClick={() => sign.run(p.containerPort)}>
                        Get a link
                      </button>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}

      <h2>Links to a port</h2>
      <form
        class="panel share-form"
        data-testid="share-form"
        onSubmit={(e) => {
          e.preventDefault();
          sign.run(Number(port));
        }}
      >
        <div class="form-grid">
          <Field label="Port">
            <input type="number" name="port" min={1} max={65535} required value={port} onInput={(e) => setPort(e.currentTarget.value)} />
          </Field>
          <Field label="Path">
            <input type="text" name="path" value={path} onInput={(e) => setPath(e.currentTarget.value)} />
          </Field>
          <Field label="Expires after" hint="Anyone with the link reaches the port until then.">
            <select name="ttl" value={String(ttlMs)} onChange={(e) => setTtlMs(Number(e.currentTarget.value))}>
              {TTL_CHOICES.map((c) => (
                <option key={c.ms} value={String(c.ms)}>
                  {c.label}
                </option>
              ))}
            </select>
          </Field>
        </div>
        <div class="row">
          <button type="submit" class="primary" disabled={sign.busy || port === ''} data-testid="share-create">
            {sign.busy ? 'Signing…' : 'Create link'}
          </button>
        </div>
        <ErrorText error={sign.error} />
      </form>
      {links.length > 0 ? (
        <ul class="share-links" data-testid="share-links">
          {links.map((l) => (
            <LinkRow key={l.url} link={l} now={now} />
          ))}
        </ul>
      ) : null}
    </div>
  );
}
