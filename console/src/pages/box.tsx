import type { JSX } from 'preact';
import { Page } from '../ui';

export function BoxPage({ id, tab }: { id: string; tab: string }): JSX.Element {
  return <Page title={`Box ${id}`}>Box page ({tab}): being built.</Page>;
}
