/**
 * Who may reach an e2b sandbox's ports through sbx's port proxy besides sbx's own credentials (a
 * key, a signed port token: src/server/port-auth.ts): e2b's traffic access token, sent as the
 * `e2b-traffic-access-token` header as e2b's proxy takes it, and, where the operator allowed it
 * (`server.e2b.publicTraffic: true`), nobody at all for a sandbox that did not ask for
 * `network.allowPublicTraffic: false`. By default no e2b port is public: every sandbox gets a
 * token, so e2b code that sends the header works, and code that does not still needs sbx's own
 * credentials.
 *
 * The token is an HMAC under `Manager.boxSecret` (the box id and its own nonce under a key derived
 * for this purpose): bound to that box's life (a later box under the same id gets another), it
 * needs no storage and survives a restart. It is the sandbox's, not a key's (as e2b's is): whoever
 * holds it reaches the sandbox's ports, nothing else.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { SbxError } from '../../../errors.js';
import type { LocalBox, Manager } from '../../../sandbox/index.js';
import type { PortGate, ServerContext } from '../../context.js';
import { PORT_TOKEN_COOKIE, PORT_TOKEN_QUERY, cookieValues, queryValues } from '../../port-auth.js';
import { TEMPLATE_LABEL } from './body.js';

/** e2b's header name (its docs, "Restrict public access"; its code interpreter sends it so). */
export const TRAFFIC_TOKEN_HEADER = 'e2b-traffic-access-token';
/** `public` on a sandbox whose ports anyone may reach; anything else (or none) needs a credential. */
export const TRAFFIC_LABEL = 'e2b.traffic';
const TRAFFIC_TOKEN_PURPOSE = 'e2b traffic access token v1';

/** The traffic access token of box `boxId`. */
export async function trafficAccessToken(manager: Manager, boxId: string): Promise<string> {
  return createHmac('sha256', await manager.secrets.boxSecret(TRAFFIC_TOKEN_PURPOSE, boxId))
    .update('traffic')
    .digest('base64url');
}

/**
 * Whether anyone may reach the box's ports: only while the operator allows public e2b ports
 * (`publicAllowed`), so neither a label set through sbx's own API nor a sandbox made before the
 * operator turned it off opens a port on its own.
 */
export function isPublic(box: LocalBox, publicAllowed: boolean): boolean {
  return publicAllowed && box.labels[TRAFFIC_LABEL] === 'public';
}

/** What create, connect and fork answer as `trafficAccessToken`: null for a public sandbox. */
export async function trafficTokenOf(manager: Manager, box: LocalBox, publicAllowed: boolean): Promise<string | null> {
  return isPublic(box, publicAllowed) ? null : trafficAccessToken(manager, box.id);
}

/** The port proxy's gate for e2b sandboxes (registered into ServerContext.portGates by the plugin). */
export function trafficGate(ctx: ServerContext, publicAllowed: boolean): PortGate {
  return {
    headers: [TRAFFIC_TOKEN_HEADER],
    async authorize(request: FastifyRequest, boxId: string): Promise<LocalBox | undefined> {
      const given = request.headers[TRAFFIC_TOKEN_HEADER];
      const box = await ctx.manager.get(boxId).catch((err: unknown) => {
        if (err instanceof SbxError && err.code === 'not_found') return undefined;
        throw err;
      });
      // Not an e2b sandbox (or none): sbx's own credentials decide, and answer a missing box.
      if (!box || box.labels[TEMPLATE_LABEL] === undefined) return undefined;
      if (given === undefined) {
        if (isPublic(box, publicAllowed)) return box;
        // No credential at all: 403 as e2b's proxy answers a protected sandbox's port (a port
        // token in the query or cookie is sbx's own, checked after the gates).
        const url = request.raw.url ?? '';
        if (queryValues(url, PORT_TOKEN_QUERY).length === 0 && cookieValues(request.headers.cookie, PORT_TOKEN_COOKIE).length === 0) {
          const missing = new SbxError(
            'forbidden',
            `sandbox ${box.id} does not allow public traffic: send its trafficAccessToken as ${TRAFFIC_TOKEN_HEADER} (or an sbx key or port token)`,
          );
          ctx.metrics.authFailures.inc();
          request.server.sbxAuth.limiter.failed(request.ip, missing);
          throw missing;
        }
        return undefined;
      }
      const { limiter } = request.server.sbxAuth;
      try {
        return await limiter.guard(request.ip, async () => {
          const expected = Buffer.from(await trafficAccessToken(ctx.manager, box.id));
          const got = Buffer.from(typeof given === 'string' ? given : given.join(','));
          if (got.length !== expected.length || !timingSafeEqual(got, expected)) {
            throw new SbxError('unauthorized', `${TRAFFIC_TOKEN_HEADER} is not the traffic access token of this sandbox`);
          }
          return box;
        });
      } catch (err) {
        ctx.metrics.authFailures.inc();
        throw err;
      }
    },
  };
}
