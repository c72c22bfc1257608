import type { JSX } from 'preact';
import type { BoxInfo } from '../types';

export function TerminalTab({ box }: { box: BoxInfo }): JSX.Element {
  return <p class="muted">The terminal of {box.id}: being built.</p>;
}
