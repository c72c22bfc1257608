import type { JSX } from 'preact';
import type { BoxInfo } from '../types';

export function PortsTab({ box }: { box: BoxInfo }): JSX.Element {
  return <p class="muted">The ports of {box.id}: being built.</p>;
}
