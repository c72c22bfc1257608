/**
 * GET /openapi.json against a real `sbx serve`: (a) the document passes openapi-spec-validator and
 * says what the routes do (statuses, answer schemas, who may call them, the WebSocket routes,
 * /metrics); (b) schemathesis, a property-based API fuzzer, runs against a real server of its own
 * and finds no 5xx and no answer the document does not allow.
 *
 * Both tools are Python (scripts/pytools.sh installs them into .build/; `npm test` passes their bin
 * dir as SBX_PYTOOLS_BIN and sets SBX_REQUIRE_SCHEMATHESIS=1, so there they fail when missing
 * rather than skip).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { testEnv } from '../testing/env.js';
import { runProcess } from '../testing/run-process.js';
import { rawRequest, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- the document is JSON read by path */

/** Where scripts/pytools.sh put the tools: SBX_PYTOOLS_BIN, else a venv of it under .build/. */
function findToolsBin(): string | undefined {
  if (process.env['SBX_PYTOOLS_BIN']) return process.env['SBX_PYTOOLS_BIN'];
  const build = join(process.cwd(), '.build');
  const venv = existsSync(build) ? readdirSync(build).find((d) => d.startsWith('pytools-') && existsSync(join(build, d, '.complete'))) : undefined;
  return venv ? join(build, venv, 'bin') : undefined;
}
const toolsBin = findToolsBin();
const dir = mkdtempSync(join(tmpdir(), 'sbx-openapi-'));

/** The tool's path, or undefined after skipping (failing when SBX_REQUIRE_SCHEMATHESIS is set). */
function tool(t: TestContext, name: string): string | undefined {
  const path = toolsBin ? join(toolsBin, name) : undefined;
  if (path && existsSync(path)) return path;
  const missing = `${name} is missing${path ? ` at ${path}` : ''} (bash scripts/pytools.sh installs it; SBX_PYTOOLS_BIN names its bin dir)`;
  if (process.env['SBX_REQUIRE_SCHEMATHESIS']) assert.fail(`SBX_REQUIRE_SCHEMATHESIS is set but ${missing}`);
  t.skip(missing);
  return undefined;
}

// In the temp dir: schemathesis keeps its example database in ./.schemathesis.
const run = (cmd: string, args: string[]) => runProcess(cmd, args, { cwd: dir, env: { ...process.env, NO_COLOR: '1' } });

let ts: TestServer;
let doc: any;

before(async () => {
  ts = await startTestServer('openapi');
  const res = await ts.call('GET', '/openapi.json', { key: null });
  assert.equal(res.status, 200, res.text);
  doc = res.json;
});

after(async () => {
  await ts?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** The component a schema names, directly or as the one member of allOf (a described reference). */
const refOf = (schema: any): string | undefined => schema?.$ref ?? schema?.allOf?.[0]?.$ref;

const ops = (): Array<{ path: string; method: string; op: any }> =>
  Object.entries(doc.paths).flatMap(([path, methods]: [string, any]) => Object.entries(methods).map(([method, op]) => ({ path, method, op })));

describe('the OpenAPI document', () => {
  test('openapi-spec-validator accepts it', async (t) => {
    const validator = tool(t, 'openapi-spec-validator');
    if (!validator) return;
    const file = join(dir, 'openapi.json');
    writeFileSync(file, JSON.stringify(doc));
    const { code, out } = await run(validator, [file]);
    assert.equal(code, 0, out);
  });

  test('every operation has its real statuses, answer schemas and the error body', () => {
    const noBody = (status: string) => status === '101' || status === '204' || status.startsWith('3') || status === 'default';
    for (const { path, method, op } of ops()) {
      const where = `${method.toUpperCase()} ${path}`;
      const statuses = Object.keys(op.responses);
      assert.ok(
        statuses.some((s) => /^[123]/.test(s)),
        `${where}: a success status`,
      );
      for (const s of statuses) {
        assert.notEqual(op.responses[s].description, 'Default Response', `${where} ${s}: described`);
        if (!noBody(s)) assert.ok(op.responses[s].content, `${where} ${s}: has a schema`);
        if (/^[45]/.test(s)) assert.equal(refOf(op.responses[s].content['application/json'].schema), '#/components/schemas/Error', `${where} ${s}`);
      }
      assert.ok(!path.includes('{*}'), `${where}: the wildcard is named`);
      assert.ok(!path.startsWith('/e2b'), `${where}: the e2b routes are docs/e2b.md's`);
    }
    const get = (path: string, method = 'get') => doc.paths[path]?.[method];
    assert.deepEqual(
      Object.keys(get('/v1/boxes', 'post').responses)
        .filter((s) => s.startsWith('2'))
        .sort(),
      ['200', '201'],
    );
    assert.ok(get('/v1/boxes', 'post').responses['409'], 'create: a taken id is 409');
    assert.ok(get('/v1/boxes/{id}', 'delete').responses['204']);
    assert.equal(refOf(get('/v1/boxes/{id}').responses['200'].content['application/json'].schema), '#/components/schemas/BoxInfo');
    assert.ok(get('/v1/workspaces/{id}/files/{path}').parameters.some((p: any) => p.in === 'path' && p.name === 'path'));
    const error = doc.components.schemas.Error;
    assert.deepEqual(Object.keys(error.properties.error.properties).sort(), ['code', 'details', 'message']);
    assert.ok(error.properties.error.properties.code.enum.includes('invalid_argument'));
    for (const name of ['BoxInfo', 'PoolInfo', 'WorkspaceInfo', 'ExecResult', 'KeyInfo']) assert.ok(doc.components.schemas[name], name);
  });

  test('who may call: public routes need nothing, box routes name their credential, the rest a key (bearer or X-API-KEY)', () => {
    assert.deepEqual(doc.security, [{ bearer: [] }, { apiKey: [] }]);
    assert.deepEqual(doc.components.securitySchemes.apiKey, {
      type: 'apiKey',
      in: 'header',
      name: 'X-API-KEY',
      description: doc.components.securitySchemes.apiKey.description,
    });
    for (const path of ['/healthz', '/readyz', '/metrics', '/v1/vnc/assets/{path}', '/v1/boxes/{id}/vnc'])
      assert.deepEqual(doc.paths[path].get.security, [], path);
    const port = [{ portToken: [] }, { portCookie: [] }, { bearer: [] }, { apiKey: [] }];
    for (const path of ['/v1/boxes/{id}/vnc/', '/v1/boxes/{id}/vnc/websockify', '/v1/boxes/{id}/ports/{port}/{path}'])
      assert.deepEqual(doc.paths[path].get.security, port, path);
    assert.deepEqual(doc.paths['/v1/boxes/{id}/heartbeat'].post.security, [{ bearer: [] }, { apiKey: [] }]);
    assert.equal(doc.paths['/v1/boxes'].post.security, undefined, 'a key route takes the default');
  });

  test('the WebSocket routes are upgrades (101) and /metrics is text/plain', () => {
    for (const path of ['/v1/boxes/{id}/exec/ws', '/v1/boxes/{id}/vnc/websockify']) {
      const op = doc.paths[path]?.get;
      assert.ok(op, `${path} is documented`);
      assert.ok(op.responses['101'], `${path}: 101`);
      assert.equal(op['x-websocket'], true);
    }
    assert.ok(doc.paths['/v1/boxes/{id}/exec/ws'].get.parameters.some((p: any) => p.in === 'query' && p.name === 'cmd'));
    assert.ok(doc.paths['/metrics'].get.responses['200'].content['text/plain']);
  });
});

describe('what schemathesis found', () => {
  test('a request line over 16 KiB is 431 with the error body (was fastify’s own shape, which no document allows)', async () => {
    const res = await rawRequest(ts.url, 'GET', `/v1/workspaces/ws/files/${'%C3%A9'.repeat(3000)}`, { authorization: `Bearer ${ts.admin}` });
    assert.equal(res.status, 431, res.text);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(res.json.error.code, 'invalid_argument');
    assert.equal(res.json.error.details.field, 'headers');
  });
});

/**
 * Operations schemathesis does not call, and why: it speaks plain HTTP (the WebSocket routes are
 * exercised by ws-exec.test.ts and vnc.test.ts); adding a pool connects to whatever engine the
 * body names and starts its warm-pool filler; a pull downloads from registries on the network.
 */
const NOT_FUZZED = (path: string, method: string, op: any) =>
  op['x-websocket'] === true ||
  (method === 'post' && (path === '/v1/pools' || path === '/v1/images/pull')) ||
  // Removing the server's one pool leaves it nothing to serve from: what follows answers 503 by design.
  (method === 'delete' && path === '/v1/pools/{name}');

describe('schemathesis against a real server', () => {
  let fuzzed: TestServer;
  before(async () => {
    // Its own server: a pool that holds at most two boxes, and creates whose generated images are
    // not on the engine fail at once with not_found (nothing is pulled). dispose() removes all.
    fuzzed = await startTestServer('fuzz', { config: { pools: [{ name: 'local', addr: testEnv.engineAddr, maxPerUser: 1, maxTotal: 2 }] } as never });
  });
  after(async () => {
    await fuzzed?.dispose();
  });

  test('no server error and no answer the document does not allow', async (t) => {
    const schemathesis = tool(t, 'schemathesis');
    if (!schemathesis) return;
    const res = await fuzzed.call('GET', '/openapi.json', { key: null });
    const spec = res.json;
    for (const [path, methods] of Object.entries(spec.paths) as Array<[string, any]>) {
      for (const method of Object.keys(methods)) if (NOT_FUZZED(path, method, methods[method])) delete methods[method];
      if (Object.keys(methods).length === 0) delete spec.paths[path];
    }
    const file = join(dir, 'fuzz.json');
    writeFileSync(file, JSON.stringify(spec));
    const started = performance.now();
    const { code, out } = await run(schemathesis, [
      'run',
      file,
      '--url',
      fuzzed.url,
      '--checks',
      'not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance',
      '--max-examples',
      process.env['SBX_FUZZ_EXAMPLES'] ?? '10',
      // One worker: schemathesis 4.32.5's coverage phase fails in CPython 3.11's compile() under threads.
      '--workers',
      '1',
      '--seed',
      process.env['SBX_FUZZ_SEED'] ?? '25',
      '--request-timeout',
      '30',
      '-H',
      `Authorization: Bearer ${fuzzed.admin}`,
    ]);
    t.diagnostic(`schemathesis took ${Math.round(performance.now() - started)} ms`);
    assert.equal(code, 0, out);
  });
});
