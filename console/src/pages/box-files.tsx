/**
 * A box's files tab (`#/boxes/<id>/files`): its whole filesystem as the box user sees it, with
 * its root and its workspace mount as shortcuts. The box's kernel decides what the user may read
 * or write; a box that is not running cannot answer, and the API's message says so.
 */
import type { JSX } from 'preact';
import { FileBrowser } from '../files/file-browser';
import type { FileSource } from '../files/file-browser';
import { href } from '../router';
import type { BoxInfo } from '../types';

export function FilesTab({ box }: { box: BoxInfo }): JSX.Element {
  const places: NonNullable<FileSource['places']> = [{ label: 'Root /', path: '/' }];
  if (box.workspaceId) places.push({ label: `Workspace ${box.mountPath}`, path: box.mountPath });
  const source: FileSource = {
    base: `/v1/boxes/${encodeURIComponent(box.id)}/files`,
    rootLabel: box.id,
    start: box.workspaceId ? box.mountPath : '/',
    places,
  };
  return (
    <div class="box-files" data-testid="box-files">
      {box.status !== 'running' ? (
        <p class="muted" data-testid="box-not-running">
          This box is {box.status}: its files are read through its processes, so start it to browse them.
        </p>
      ) : null}
      {box.workspaceId ? (
        <p class="muted">
          {box.mountPath} is workspace <a href={href('workspaces', box.workspaceId)}>{box.workspaceId}</a>, which keeps its files when the box is removed.
        </p>
      ) : null}
      <FileBrowser source={source} />
    </div>
  );
}
