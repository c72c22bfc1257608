import type { JSX } from 'preact';
import { Page } from '../ui';

export function BoxesPage(): JSX.Element {
  return <Page title="Boxes">Boxes page: being built.</Page>;
}
