/** Pieces the admin pages (images, pools & nodes, keys) share. */
import type { ComponentChildren, JSX } from 'preact';
import { ErrorText, Page } from '../ui';
import type { Polled } from '../ui';

/**
 * The whole page when its first load failed (a user key on an admin page: the API's forbidden
 * message), else undefined and the page draws itself.
 */
export function refusedPage(title: string, polled: Polled<unknown>): JSX.Element | undefined {
  if (!polled.error || polled.data) return undefined;
  return (
    <Page title={title}>
      <ErrorText error={polled.error} />
    </Page>
  );
}

/** A list as a table with a last, unlabelled column of actions; `empty` when it has no rows, loading until `loaded`. */
export function ListTable(props: { headers: string[]; loaded: boolean; empty: string | false; label?: string; children: ComponentChildren }): JSX.Element {
  return (
    <div class="table-wrap">
      <table aria-label={props.label}>
        <thead>
          <tr>
            {props.headers.map((h) => (
              <th key={h}>{h}</th>
            ))}
            <th class="actions-col">
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
      {props.empty ? <p class="hint empty">{props.empty}</p> : null}
      {!props.loaded ? <p class="loading">Loading…</p> : null}
    </div>
  );
}
