import type { JSX } from 'preact';
import type { BoxInfo } from '../types';

export function FilesTab({ box }: { box: BoxInfo }): JSX.Element {
  return <p class="muted">The files of {box.id}: being built.</p>;
}
