/** GET /v1/whoami: the key a call is made with, as `sbx whoami` shows it. Never another key's. */
import type { FastifyInstance } from 'fastify';
import { requireKey } from './auth.js';
import { WhoamiSchema, replies } from './schemas.js';

export function whoamiRoutes(app: FastifyInstance): void {
  app.get(
    '/v1/whoami',
    { schema: { summary: 'The calling API key: its id, name, role and owner (never its secret)', tags: ['keys'], response: replies({ 200: WhoamiSchema }) } },
    async (req) => {
      // requireKey: a box token is refused; a key learns only about itself.
      const p = requireKey(req.caller);
      return { keyId: p.keyId, name: p.name, role: p.role, owner: p.owner, admin: p.role === 'admin' };
    },
  );
}
