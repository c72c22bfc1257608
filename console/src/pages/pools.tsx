import type { JSX } from 'preact';
import { Page } from '../ui';

export function PoolsPage(): JSX.Element {
  return <Page title="Pools & nodes">Pools & nodes page: being built.</Page>;
}
