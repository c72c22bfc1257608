/** The console's frame: sign-in, the navigation, who is signed in, and the page the route names. */
import type { JSX } from 'preact';
import { createContext } from 'preact';
import { useContext, useEffect, useState } from 'preact/hooks';
import { currentUser, signIn, signOut, whenSignedOut } from './api';
import type { Whoami } from './api';
import { href, useRoute } from './router';
import type { Route } from './router';
import { ErrorText, useAction } from './ui';
import { BoxesPage } from './pages/boxes';
import { BoxPage } from './pages/box';
import { WorkspacesPage, WorkspacePage } from './pages/workspaces';
import { ImagesPage } from './pages/images';
import { PoolsPage } from './pages/pools';
import { KeysPage } from './pages/keys';
import { MetricsPage } from './pages/metrics';

const UserContext = createContext<Whoami | undefined>(undefined);

/** Who is signed in (every page is under a session). */
export function useUser(): Whoami {
  const user = useContext(UserContext);
  if (!user) throw new Error('no session');
  return user;
}

const NAV: Array<{ parts: string; label: string; admin?: boolean }> = [
  { parts: 'boxes', label: 'Boxes' },
  { parts: 'workspaces', label: 'Workspaces' },
  { parts: 'images', label: 'Images' },
  { parts: 'pools', label: 'Pools & nodes', admin: true },
  { parts: 'keys', label: 'Keys', admin: true },
  { parts: 'metrics', label: 'Metrics' },
];

function pageOf(route: Route): JSX.Element {
  const [section = 'boxes', id, tab] = route.parts;
  switch (section) {
    case 'boxes':
      return id ? <BoxPage id={id} tab={tab ?? 'logs'} /> : <BoxesPage />;
    case 'workspaces':
      return id ? <WorkspacePage id={id} /> : <WorkspacesPage />;
    case 'images':
      return <ImagesPage />;
    case 'pools':
      return <PoolsPage />;
    case 'keys':
      return <KeysPage />;
    case 'metrics':
      return <MetricsPage />;
    default:
      return <p class="error">No page {section}: pick one on the left.</p>;
  }
}

function SignIn({ onSignedIn }: { onSignedIn: (w: Whoami) => void }): JSX.Element {
  const [key, setKey] = useState('');
  const action = useAction(async () => onSignedIn(await signIn(key.trim())));
  return (
    <main class="signin">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          action.run();
        }}
      >
        <h1>sbx</h1>
        <p>Sign in with an API key. The key is exchanged for a session and not kept by this page.</p>
        <label class="field">
          <span class="label">API key</span>
          <input
            type="password"
            name="apiKey"
            autocomplete="off"
            required
            autofocus
            placeholder="sbxk_…"
            value={key}
            onInput={(e) => setKey(e.currentTarget.value)}
          />
        </label>
        <button type="submit" class="primary" disabled={action.busy || key.trim() === ''}>
          {action.busy ? 'Signing in…' : 'Sign in'}
        </button>
        <ErrorText error={action.error} />
      </form>
    </main>
  );
}

export function App(): JSX.Element {
  const [user, setUser] = useState<Whoami | undefined | null>(null); // null: not known yet
  const [error, setError] = useState<unknown>(undefined);
  const [menuOpen, setMenuOpen] = useState(false);
  const route = useRoute();
  useEffect(() => {
    whenSignedOut(() => setUser(undefined));
    currentUser().then(setUser, (err: unknown) => {
      setError(err);
      setUser(undefined);
    });
  }, []);
  useEffect(() => setMenuOpen(false), [route]);

  if (user === null) return <p class="loading">Loading…</p>;
  if (user === undefined)
    return (
      <>
        <ErrorText error={error} />
        <SignIn onSignedIn={setUser} />
      </>
    );
  const section = route.parts[0] ?? 'boxes';
  return (
    <UserContext.Provider value={user}>
      <div class="shell">
        <nav class={`nav ${menuOpen ? 'open' : ''}`} aria-label="Sections">
          <div class="brand">
            <a href={href('boxes')}>sbx</a>
            <button type="button" class="menu" aria-expanded={menuOpen} aria-label="Menu" onClick={() => setMenuOpen(!menuOpen)}>
              ☰
            </button>
          </div>
          <ul>
            {NAV.filter((n) => !n.admin || user.admin).map((n) => (
              <li key={n.parts}>
                <a href={href(n.parts)} aria-current={section === n.parts ? 'page' : undefined}>
                  {n.label}
                </a>
              </li>
            ))}
          </ul>
          <div class="who" data-testid="whoami">
            <span title={`key ${user.keyId}`}>
              {user.name} · {user.admin ? 'admin' : user.owner}
            </span>
            <button type="button" data-testid="sign-out" onClick={() => void signOut()}>
              Sign out
            </button>
          </div>
        </nav>
        <main class="content">{pageOf(route)}</main>
      </div>
    </UserContext.Provider>
  );
}
