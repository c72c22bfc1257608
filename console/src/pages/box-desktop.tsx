/**
 * The Desktop tab: the box's VNC viewer page (src/server/vnc.ts, noVNC served by sbx) in a frame,
 * opened with a signed URL (`POST /v1/boxes/:id/vnc-url`): a frame sends no Authorization header,
 * so the page swaps the URL's token for a cookie scoped to the box's VNC path. Reconnect asks for a
 * new URL and loads the viewer again.
 */
import type { JSX } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, encodePath } from '../api';
import type { BoxInfo } from '../types';
import { ErrorText } from '../ui';

/** How long a viewer URL is valid; the connection it opens outlives it, a reconnect asks for a new one. */
const VIEWER_TTL_MS = 3_600_000;

interface VncUrl {
  url: string;
  expiresAt: string;
}

export function DesktopTab({ box }: { box: BoxInfo }): JSX.Element {
  const [viewer, setViewer] = useState<VncUrl | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    if (!box.vnc) return;
    const ctl = new AbortController();
    setError(undefined);
    api<VncUrl>(`/v1/boxes/${encodePath(box.id)}/vnc-url`, { method: 'POST', json: { ttlMs: VIEWER_TTL_MS }, signal: ctl.signal }).then(
      (v) => setViewer(v),
      (err: unknown) => !ctl.signal.aborted && setError(err),
    );
    return () => ctl.abort();
  }, [box.id, box.vnc, attempt]);

  if (!box.vnc) {
    return (
      <p class="muted" data-testid="desktop-none">
        This box has no desktop: a desktop needs a box created with VNC on (<code>vnc: true</code>) from a desktop image such as <code>sbx-desktop</code>.
      </p>
    );
  }
  return (
    <div class="desktop-tab">
      <div class="row">
        <button
          type="button"
          data-testid="desktop-reconnect"
          onClick={() => {
            setViewer(undefined);
            setAttempt((a) => a + 1);
          }}
        >
          Reconnect
        </button>
        {viewer ? (
          <a href={viewer.url} target="_blank" rel="noopener noreferrer" data-testid="desktop-open">
            Open in a new window ↗
          </a>
        ) : null}
      </div>
      <ErrorText error={error} />
      {viewer ? (
        <iframe key={viewer.url} class="desktop" src={viewer.url} title={`Desktop of ${box.id}`} data-testid="desktop-frame" />
      ) : error ? null : (
        <p class="muted">Connecting…</p>
      )}
    </div>
  );
}
