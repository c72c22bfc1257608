/**
 * STUB on feat/c-files only, for the files tab's tests: the box page of its own branch replaces
 * this at merge. It loads the box and renders FilesTab for `#/boxes/<id>/files`.
 */
import type { JSX } from 'preact';
import { api } from '../api';
import type { BoxInfo } from '../types';
import { ErrorText, Page, usePoll } from '../ui';
import { FilesTab } from './box-files';

export function BoxPage({ id, tab }: { id: string; tab: string }): JSX.Element {
  const box = usePoll((signal) => api<BoxInfo>(`/v1/boxes/${encodeURIComponent(id)}`, { signal }), 0, [id]);
  return (
    <Page title={`Box ${id}`}>
      <ErrorText error={box.error} />
      {tab === 'files' && box.data ? <FilesTab box={box.data} /> : <p class="muted">Box page ({tab}): being built.</p>}
    </Page>
  );
}
