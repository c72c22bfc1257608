import type { JSX } from 'preact';
import type { BoxInfo } from '../types';

export function DesktopTab({ box }: { box: BoxInfo }): JSX.Element {
  return <p class="muted">The desktop of {box.id}: being built.</p>;
}
