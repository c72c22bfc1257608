/**
 * GET /openapi.json: @fastify/swagger over the routes' own zod schemas (fastify-type-provider-zod),
 * with what neither knows: who may call each route (`config.auth`, context.ts), the WebSocket
 * routes (@fastify/websocket hides them), a name for the wildcard parameter, and answers without
 * a body. The e2b routes stay out (their plugin hides them; docs/e2b.md).
 */
import type { SwaggerOptions } from '@fastify/swagger';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { PORT_TOKEN_COOKIE, PORT_TOKEN_QUERY } from './port-auth.js';

/** The credentials an API key travels in (request-auth.ts); the global default. */
export const KEY_SECURITY: Array<Record<string, string[]>> = [{ bearer: [] }, { apiKey: [] }];
/** A port of a box (proxy, VNC): a port access token as ?sbx_token= or its cookie, or the owner's key. */
export const PORT_SECURITY: Array<Record<string, string[]>> = [{ portToken: [] }, { portCookie: [] }, ...KEY_SECURITY];

type TransformInput = Parameters<typeof jsonSchemaTransform>[0];
type RouteSchema = Record<string, unknown> & { params?: unknown; hide?: boolean; security?: unknown };

const SUCCESS: Record<string, string> = { '200': 'OK', '201': 'Created' };

/** The name the document gives fastify's `*` (the rest of the path). */
const WILDCARD = 'path';

function transform(input: TransformInput): ReturnType<typeof jsonSchemaTransform> {
  const route = input.route as { websocket?: boolean; config?: { auth?: string } };
  let schema = input.schema as RouteSchema | undefined;
  let url = input.url;
  // @fastify/websocket hides its routes; they are documented as an upgrade (101) instead.
  if (route.websocket && schema) schema = { ...schema, hide: false };
  if (url.endsWith('*')) {
    url = `${url.slice(0, -1)}:${WILDCARD}`;
    if (schema?.params instanceof z.ZodObject && '*' in schema.params.shape) {
      const { '*': tail, ...rest } = schema.params.shape as Record<string, z.ZodType>;
      schema = { ...schema, params: z.object({ ...rest, [WILDCARD]: tail!.describe('the rest of the path, slashes included') }).strict() };
    }
  }
  const out = jsonSchemaTransform({ ...input, schema: schema as TransformInput['schema'], url });
  const doc = out.schema as RouteSchema & { response?: Record<string, { description?: string }> };
  if (!doc || doc.hide) return out;
  // 'box' routes name their credential in schema.security; 'key' ones take the global default.
  if ((route.config?.auth ?? 'key') === 'public') doc.security = [];
  for (const [status, json] of Object.entries(doc.response ?? {})) {
    // No content: swagger leaves it out for a schema of type null.
    if (status === '101' || status === '204' || status.startsWith('3')) doc.response![status] = { type: 'null', description: json.description } as never;
    else json.description ??= SUCCESS[status];
  }
  if (route.websocket) doc['x-websocket'] = true;
  return out;
}

export const swaggerOptions: SwaggerOptions = {
  openapi: {
    openapi: '3.0.3',
    info: {
      title: 'sbx',
      version: '1',
      description: 'sbx HTTP API; see docs/api.md. The e2b-compatible routes under /e2b are not described here (docs/e2b.md).',
    },
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key> (sbxk_...); on the heartbeat route also the box token' },
        apiKey: { type: 'apiKey', in: 'header', name: 'X-API-KEY', description: 'the API key in X-API-KEY (the e2b SDK’s header)' },
        portToken: {
          type: 'apiKey',
          in: 'query',
          name: PORT_TOKEN_QUERY,
          description: 'a port access token (proxy-url with signed: true, vnc-url); swapped for the cookie',
        },
        portCookie: { type: 'apiKey', in: 'cookie', name: PORT_TOKEN_COOKIE, description: 'the cookie a port access token was swapped for' },
      },
    },
    security: KEY_SECURITY,
  },
  transform,
  transformObject: (input) => {
    const doc = jsonSchemaTransformObject(input) as { components?: { schemas?: Record<string, unknown> } };
    // The input registry's copies of the answer schemas (`BoxInfoInput`, ...) that nothing uses.
    const schemas = doc.components?.schemas ?? {};
    for (const name of Object.keys(schemas)) {
      const { [name]: _self, ...others } = schemas;
      if (name.endsWith('Input') && !JSON.stringify({ ...doc, components: { schemas: others } }).includes(`"#/components/schemas/${name}"`))
        delete schemas[name];
    }
    return doc as ReturnType<typeof jsonSchemaTransformObject>;
  },
};
