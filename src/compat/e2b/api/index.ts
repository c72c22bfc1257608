export { DEFAULT_E2B_TEMPLATES, E2B_API_PREFIX, e2bApiRoutes } from './plugin.js';
export type { E2bApiOptions } from './plugin.js';
