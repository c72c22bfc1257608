import type { JSX } from 'preact';
import { Page } from '../ui';

export function KeysPage(): JSX.Element {
  return <Page title="Keys">Keys page: being built.</Page>;
}
