import type { JSX } from 'preact';
import { Page } from '../ui';

export function MetricsPage(): JSX.Element {
  return <Page title="Metrics">Metrics page: being built.</Page>;
}
