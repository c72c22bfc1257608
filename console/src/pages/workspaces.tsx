import type { JSX } from 'preact';
import { Page } from '../ui';

export function WorkspacesPage(): JSX.Element {
  return <Page title="Workspaces">Workspaces page: being built.</Page>;
}

export function WorkspacePage({ id }: { id: string }): JSX.Element {
  return <Page title={`Workspace ${id}`}>Workspace page: being built.</Page>;
}
