/**
 * The e2b-compatible surface as a plugin of the server: the control plane under /e2b/api and
 * envd under /e2b/envd (docs/e2b.md). It stands on the server's core (context, auth, errors);
 * the core knows nothing of it, serve() registers it.
 */
import type { ServerPlugin } from '../context.js';
import { e2bApiRoutes } from './api/plugin.js';
import type { E2bApiOptions } from './api/plugin.js';
import { envdRoutes } from './envd/routes.js';

export { DEFAULT_E2B_TEMPLATES, E2B_API_PREFIX } from './api/plugin.js';
export type { E2bApiOptions } from './api/plugin.js';
export { ENVD_PREFIX } from './envd/routes.js';

export function e2bPlugin(opts: E2bApiOptions = {}): ServerPlugin {
  return (app, ctx) => {
    e2bApiRoutes(app, ctx, opts);
    envdRoutes(app, ctx);
  };
}
