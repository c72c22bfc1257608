/**
 * A box's page — a minimal stand-in on this branch (feat/c-termports) so the Terminal, Ports and
 * Desktop tabs can be reached and tested; the box page shell of another branch replaces it.
 */
import type { JSX } from 'preact';
import { api, encodePath } from '../api';
import { href } from '../router';
import { ErrorText, Page, Status, usePoll } from '../ui';
import type { BoxInfo } from '../types';
import { TerminalTab } from './box-terminal';
import { PortsTab } from './box-ports';
import { DesktopTab } from './box-desktop';
import { FilesTab } from './box-files';

const TABS = [
  { id: 'terminal', label: 'Terminal' },
  { id: 'files', label: 'Files' },
  { id: 'ports', label: 'Ports' },
  { id: 'desktop', label: 'Desktop' },
];

export function BoxPage({ id, tab }: { id: string; tab: string }): JSX.Element {
  const box = usePoll((signal) => api<BoxInfo>(`/v1/boxes/${encodePath(id)}`, { signal }), 5000, [id]);
  return (
    <Page title={`Box ${id}`} actions={box.data ? <Status status={box.data.status} /> : null}>
      <nav class="tabs" aria-label="Box">
        {TABS.map((t) => (
          <a key={t.id} href={href('boxes', id, t.id)} aria-current={tab === t.id ? 'page' : undefined}>
            {t.label}
          </a>
        ))}
      </nav>
      <ErrorText error={box.error} />
      {box.data ? (
        tab === 'files' ? (
          <FilesTab box={box.data} />
        ) : tab === 'ports' ? (
          <PortsTab box={box.data} />
        ) : tab === 'desktop' ? (
          <DesktopTab box={box.data} />
        ) : (
          <TerminalTab box={box.data} />
        )
      ) : null}
    </Page>
  );
}
