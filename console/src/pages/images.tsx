import type { JSX } from 'preact';
import { Page } from '../ui';

export function ImagesPage(): JSX.Element {
  return <Page title="Images">Images page: being built.</Page>;
}
