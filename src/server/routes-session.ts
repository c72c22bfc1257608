/**
 * Console sign-in and sign-out (sessions.ts): `POST /v1/session` takes an API key once and answers
 * with the session cookie and the page's session token; `DELETE /v1/session` ends it.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { requireKey } from './auth.js';
import { cookieValues, isHttps } from './port-auth.js';
import { ownOrigin } from './request-auth.js';
import { WhoamiSchema, noContent, replies } from './schemas.js';
import { CONSOLE_PATH, CONSOLE_TOKEN_COOKIE, SESSION_COOKIE } from './sessions.js';
import type { Principal } from './keys.js';

const SignInSchema = z.object({ apiKey: z.string().min(1).max(256) }).strict();
const SessionSchema = z
  .object({
    sessionToken: z.string().describe('send as X-SBX-Session with every request of this session (a WebSocket: the sbx.session.<token> subprotocol)'),
    expiresAt: z.string(),
    whoami: WhoamiSchema,
  })
  .meta({ id: 'Session' });

function whoami(p: Principal): z.infer<typeof WhoamiSchema> {
  return { keyId: p.keyId, name: p.name, role: p.role, owner: p.owner, admin: p.role === 'admin' };
}

/** The two cookies of a session (sessions.ts): the HttpOnly one the API reads, and the token for the console's page. */
function sessionCookies(req: FastifyRequest, values: { cookie: string; token: string }, maxAgeS: number): string[] {
  const secure = isHttps(req) ? ['Secure'] : [];
  return [
    [`${SESSION_COOKIE}=${values.cookie}`, 'Path=/v1', `Max-Age=${maxAgeS}`, 'HttpOnly', 'SameSite=Strict', ...secure].join('; '),
    [`${CONSOLE_TOKEN_COOKIE}=${values.token}`, `Path=${CONSOLE_PATH}`, `Max-Age=${maxAgeS}`, 'SameSite=Strict', ...secure].join('; '),
  ];
}

export function sessionRoutes(app: FastifyInstance): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  r.post(
    '/v1/session',
    {
      config: { auth: 'public' },
      schema: {
        summary: 'Console sign-in: an API key for an HttpOnly session cookie and the session token (the key is not kept)',
        tags: ['session'],
        body: SignInSchema,
        response: replies({ 200: SessionSchema }),
      },
    },
    async (req, reply) => {
      const { ctx, limiter, sessions } = req.server.sbxAuth;
      // A page of another origin must not sign this browser in (to its own key, say): only our own pages.
      const origin = req.headers.origin;
      if (origin !== undefined && !ownOrigin(origin, req.headers.host, ctx.publicUrl())) {
        throw new SbxError('forbidden', `sign-in is accepted from this server's own pages only, not from Origin ${origin}`, { details: { origin } });
      }
      const principal = await limiter.guard(req.ip, () => {
        const p = ctx.keys.verify(req.body.apiKey);
        if (!p) {
          ctx.metrics.authFailures.inc();
          throw new SbxError('unauthorized', 'API key is not valid (unknown, revoked or mistyped)', { details: { field: 'apiKey' } });
        }
        return p;
      });
      const opened = sessions.open(principal);
      const maxAge = Math.floor((opened.expiresAt - Date.now()) / 1000);
      return reply
        .header('set-cookie', sessionCookies(req, { cookie: opened.cookie, token: opened.sessionToken }, maxAge))
        .header('cache-control', 'no-store')
        .send({ sessionToken: opened.sessionToken, expiresAt: new Date(opened.expiresAt).toISOString(), whoami: whoami(principal) });
    },
  );

  r.delete(
    '/v1/session',
    {
      schema: {
        summary: 'Console sign-out: ends the session and clears its cookie',
        tags: ['session'],
        response: replies({ 204: noContent('signed out') }),
      },
    },
    async (req, reply) => {
      requireKey(req.caller);
      for (const cookie of cookieValues(req.headers.cookie, SESSION_COOKIE)) req.server.sbxAuth.sessions.close(cookie);
      return reply
        .code(204)
        .header('set-cookie', sessionCookies(req, { cookie: '', token: '' }, 0))
        .send();
    },
  );
}
