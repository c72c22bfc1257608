/**
 * A box's page (`#/boxes/<id>/<tab>`): its info (polled; a GET, so not use), its lifecycle
 * actions, and the tabs. A box the key may not see answers 404 like a missing one: the API's
 * message is shown, never a blank page.
 */
import type { JSX } from 'preact';
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { api } from '../api';
import { href, navigate } from '../router';
import type { BoxInfo } from '../types';
import { ConfirmButton, ErrorText, Page, Status, ago, duration, useAction, usePoll } from '../ui';
import { DesktopTab } from './box-desktop';
import { FilesTab } from './box-files';
import { LogsTab } from './box-logs';
import { PortsTab } from './box-ports';
import { HistoryTab } from './box-run';
import { TerminalTab } from './box-terminal';
import { boxPath, lifecycle, removeBox } from './boxes';
import type { LifecycleVerb } from './boxes';
import './box.css';

const BOX_EVERY_MS = 3000;

/**
 * The first is what a box's page opens on: its log, a read. A terminal is a use that keeps the box
 * alive while it is open, so it opens only when asked for (its tab), never by looking at the box.
 */
const TABS: Array<{ tab: string; label: string; when?: (b: BoxInfo) => boolean }> = [
  { tab: 'logs', label: 'Logs' },
  { tab: 'terminal', label: 'Terminal' },
  { tab: 'files', label: 'Files' },
  { tab: 'ports', label: 'Ports' },
  { tab: 'desktop', label: 'Desktop', when: (b) => b.vnc },
  { tab: 'history', label: 'History' },
];

export function BoxPage({ id, tab }: { id: string; tab: string }): JSX.Element {
  const box = usePoll((signal) => api<BoxInfo>(boxPath(id), { signal }), BOX_EVERY_MS, [id]);
  const b = box.data?.id === id || box.data?.id.startsWith(id) ? box.data : undefined;
  if (!b) {
    return (
      <Page title={`Box ${id}`}>
        <div data-testid="box-missing">
          {box.error !== undefined ? (
            <>
              <ErrorText error={box.error} />
              <p>
                <a href={href('boxes')}>Back to the boxes</a>
              </p>
            </>
          ) : (
            <p class="loading">Loading…</p>
          )}
        </div>
      </Page>
    );
  }
  const tabs = TABS.filter((t) => !t.when || t.when(b));
  // A tab named in the address shows even when the nav leaves it out (a box without VNC: the desktop tab says so).
  const current = TABS.some((t) => t.tab === tab) ? tab : 'logs';
  return (
    <Page
      title={`Box ${b.id}`}
      actions={
        <>
          <span data-testid="box-status">
            <Status status={b.status} />
          </span>
          <BoxActions box={b} onChanged={box.reload} />
        </>
      }
    >
      {/* The box went away (or a poll failed) after it was shown: say so above what was last known. */}
      <ErrorText error={box.error} />
      <BoxInfoPanel box={b} />
      <nav class="tabs" aria-label="Box" data-testid="box-tabs">
        {tabs.map((t) => (
          <a key={t.tab} href={href('boxes', b.id, t.tab)} aria-current={t.tab === current ? 'page' : undefined}>
            {t.label}
          </a>
        ))}
      </nav>
      <div class="tab-body" data-testid={`tab-${current}`}>
        <TabBody tab={current} box={b} />
      </div>
    </Page>
  );
}

function TabBody({ tab, box }: { tab: string; box: BoxInfo }): JSX.Element {
  switch (tab) {
    case 'files':
      return <FilesTab box={box} />;
    case 'ports':
      return <PortsTab box={box} />;
    case 'desktop':
      return <DesktopTab box={box} />;
    case 'terminal':
      return <TerminalTab box={box} />;
    case 'history':
      return <HistoryTab box={box} />;
    default:
      return <LogsTab box={box} />;
  }
}

const VERBS: Array<{ verb: LifecycleVerb; label: string; when: (b: BoxInfo) => boolean }> = [
  { verb: 'start', label: 'Start', when: (b) => b.status === 'stopped' },
  { verb: 'stop', label: 'Stop', when: (b) => b.status === 'running' || b.status === 'paused' || b.status === 'restarting' },
  { verb: 'pause', label: 'Pause', when: (b) => b.status === 'running' },
  { verb: 'resume', label: 'Resume', when: (b) => b.status === 'paused' || b.status === 'archived' },
  { verb: 'archive', label: 'Archive', when: (b) => b.status !== 'archived' && b.status !== 'creating' },
];

function BoxActions({ box, onChanged }: { box: BoxInfo; onChanged: () => void }): JSX.Element {
  const [note, setNote] = useState<string | undefined>(undefined);
  const action = useAction(async (fn: () => Promise<unknown>) => {
    setNote(undefined);
    await fn();
  }, onChanged);
  return (
    <div class="box-actions" data-testid="box-actions">
      {VERBS.filter((v) => v.when(box)).map((v) => (
        <button type="button" key={v.verb} disabled={action.busy} onClick={() => action.run(() => lifecycle(box.id, v.verb))}>
          {v.label}
        </button>
      ))}
      <button
        type="button"
        disabled={action.busy || box.status === 'archived'}
        title="Save the box's filesystem as an image new boxes can be created from"
        onClick={() =>
          action.run(async () => {
            const snap = await api<{ id: string; image: string }>(boxPath(box.id, '/snapshots'), { method: 'POST', json: {} });
            setNote(`Snapshot ${snap.id} taken (${snap.image})`);
          })
        }
      >
        Snapshot
      </button>
      <ConfirmButton
        label="Remove"
        confirm={`Remove ${box.id} and everything in it?`}
        danger
        disabled={action.busy}
        onConfirm={() =>
          action.run(async () => {
            await removeBox(box.id);
            navigate('boxes');
          })
        }
      />
      {action.busy ? <span class="muted">Working…</span> : null}
      {note ? (
        <span class="note" role="status" data-testid="box-note">
          {note}
        </span>
      ) : null}
      <ErrorText error={action.error} />
    </div>
  );
}

function egressText(p: BoxInfo['networkPolicy']): string {
  const e = p.egress;
  if (e === 'all' || e === 'none') return e;
  const parts = [e.allow?.length ? `allow ${e.allow.join(', ')}` : '', e.deny?.length ? `deny ${e.deny.join(', ')}` : ''].filter(Boolean);
  return parts.join('; ') || 'rules';
}

function BoxInfoPanel({ box }: { box: BoxInfo }): JSX.Element {
  const now = Date.now();
  const ended = box.status === 'stopped' || box.status === 'restarting';
  const rows: Array<[string, JSX.Element | string]> = [
    ['Owner', box.owner],
    ['Pool', box.pool],
    ['Image', <code>{box.image}</code>],
    ['Policy', box.policy],
    ['Created', `${ago(box.createdAt, now)} ago (${box.createdAt})`],
    ['Last active', `${ago(box.lastActive, now)} ago`],
    ['Idle timeout', box.idleTimeoutMs > 0 ? duration(box.idleTimeoutMs) : 'none'],
    ['Max lifetime', box.maxLifetimeMs > 0 ? duration(box.maxLifetimeMs) : 'none'],
    ['Processes', String(box.processCount)],
    ['Exec path', box.execPath],
    [
      'Workspace',
      box.workspaceId ? (
        <>
          <a href={href('workspaces', box.workspaceId)}>{box.workspaceId}</a> at <code>{box.mountPath}</code>
        </>
      ) : (
        'none'
      ),
    ],
    ['Ports', box.ports.length ? box.ports.map((p) => `${p.containerPort}/${p.protocol} → ${p.hostIp || '0.0.0.0'}:${p.hostPort}`).join(', ') : 'none'],
    ['Network egress', egressText(box.networkPolicy)],
    ['Desktop (VNC)', box.vnc ? 'yes' : 'no'],
  ];
  if (ended) rows.push(['Exit code', `${box.exitCode ?? '—'}${box.oomKilled ? ' (killed: out of memory)' : ''}`]);
  const labels = Object.entries(box.labels);
  if (labels.length) rows.push(['Labels', labels.map(([k, v]) => `${k}=${v}`).join(', ')]);
  return (
    // Open on a wide screen; on a phone the tabs come first.
    <details class="panel box-info" open={!matchMedia('(max-width: 760px)').matches} data-testid="box-info">
      <summary>Details</summary>
      <dl class="info">
        {rows.map(([k, v]) => (
          <Fragment key={k}>
            <dt>{k}</dt>
            <dd data-field={k}>{v}</dd>
          </Fragment>
        ))}
      </dl>
    </details>
  );
}
