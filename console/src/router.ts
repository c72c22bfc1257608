/**
 * Hash routes (`#/boxes/<id>/terminal`): the server serves one page at `/`, and `/metrics`,
 * `/healthz` and the API keep their own paths.
 */
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  /** The path's segments: `#/boxes/b-1/files` → ['boxes', 'b-1', 'files']. */
  parts: string[];
  /** The query after `?` in the hash. */
  query: URLSearchParams;
}

export function currentRoute(): Route {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path = '', q = ''] = raw.split('?', 2);
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(q) };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const changed = (): void => setRoute(currentRoute());
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return route;
}

/** The href of a console route: href('boxes', id) → `#/boxes/<id>`. */
export function href(...parts: string[]): string {
  return `#/${parts.map(encodeURIComponent).join('/')}`;
}

export function navigate(...parts: string[]): void {
  location.hash = href(...parts);
}
