/**
 * serve() and `sbx serve` options: flags over SBX_* over defaults, TLS on a real socket,
 * plain HTTP refused off loopback, request ids.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { serveOptions } from '../cli/serve.js';
import { isSbxError } from '../errors.js';
import { loadConfig } from '../sandbox/config.js';
import { serve } from './index.js';
import { startTestServer } from '../testing/server.js';
import { selfSignedCert } from '../testing/tls.js';
import { testEnv } from '../testing/env.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-serve-opts-'));
const IMAGE = testEnv.baseImage;
after(() => rmSync(dir, { recursive: true, force: true }));

describe('serve options', () => {
  test('flags win over SBX_* variables, which win over defaults', () => {
    const env = { SBX_DATA_DIR: dir, SBX_PORT: '8081', SBX_HOST: '127.0.0.2', SBX_GRPC_PORT: '9091', SBX_SHUTDOWN_GRACE: '3s', SBX_BODY_LIMIT: '2048' };
    const fromEnv = serveOptions({}, env);
    assert.equal(fromEnv.port, 8081);
    assert.equal(fromEnv.host, '127.0.0.2');
    assert.deepEqual(fromEnv.grpc, { port: 9091 });
    assert.equal(fromEnv.shutdownGraceMs, 3000);
    assert.equal(fromEnv.bodyLimitBytes, 2048);
    assert.equal(fromEnv.dataDir, dir);
    const flags = serveOptions({ port: 9000, host: '127.0.0.3', dataDir: join(dir, 'x') }, env);
    assert.equal(flags.port, 9000);
    assert.equal(flags.host, '127.0.0.3');
    assert.equal(flags.dataDir, join(dir, 'x'));
    assert.equal(flags.config?.dataDir, join(dir, 'x'), 'the Manager gets the same data dir');
    const none = serveOptions({}, {});
    assert.equal(none.port, 7070);
    assert.equal(none.host, '127.0.0.1');
    assert.equal(none.grpc, undefined, 'gRPC is off by default');
    assert.throws(
      () => serveOptions({ tlsCert: 'c.pem' }, {}),
      (e) => isSbxError(e, 'invalid_argument'),
    );
  });

  test('the config file’s server: section sits under flags and SBX_* and over defaults; durations and sizes as strings', async () => {
    const file = join(dir, 'sbx.yaml');
    writeFileSync(
      file,
      [
        'name: opts-file',
        'cleanupInterval: 0',
        'pools:',
        '  - name: local',
        '    idleTimeout: 5m',
        'server:',
        '  host: 127.0.0.1',
        '  port: 0',
        '  tls: { cert: certs/c.pem, key: /abs/k.pem }',
        '  grpc: { port: 7999, host: 127.0.0.4, advertise: 172.17.0.1:7999 }',
        '  shutdownGrace: 1m30s',
        '  bodyLimit: 2m',
        '  execOutputBudget: 512m',
        '  bodyTimeout: 45s',
        '  wsMaxPayload: 4m',
        '',
      ].join('\n'),
    );
    const o = serveOptions({ config: file }, { SBX_DATA_DIR: dir });
    assert.equal(o.host, '127.0.0.1');
    assert.equal(o.port, 0);
    assert.deepEqual(o.tls, { certFile: join(dir, 'certs/c.pem'), keyFile: '/abs/k.pem' }, 'relative paths are the file’s directory’s');
    assert.deepEqual(o.grpc, { port: 7999, host: '127.0.0.4', advertise: '172.17.0.1:7999' });
    assert.equal(o.shutdownGraceMs, 90_000);
    assert.equal(o.bodyLimitBytes, 2 * 1024 * 1024);
    assert.equal(o.execOutputBudgetBytes, 512 * 1024 * 1024);
    assert.equal(o.bodyTimeoutMs, 45_000);
    assert.equal(o.wsMaxPayloadBytes, 4 * 1024 * 1024);
    assert.equal(
      serveOptions({ config: file }, { SBX_DATA_DIR: dir, SBX_BODY_TIMEOUT: '0', SBX_WS_MAX_PAYLOAD: '1024' }).bodyTimeoutMs,
      0,
      'env beats the file; 0 = never',
    );
    assert.equal(serveOptions({ config: file }, { SBX_DATA_DIR: dir, SBX_WS_MAX_PAYLOAD: '1024' }).wsMaxPayloadBytes, 1024);
    assert.equal(o.config?.name, 'opts-file', 'the Manager’s part of the same file is read, the server: section left to serve');
    assert.equal(o.config?.pools?.[0]?.idleTimeoutMs, 300_000);
    // SBX_CONFIG finds the same file; SBX_* beats it; flags beat both.
    const env = { SBX_CONFIG: file, SBX_DATA_DIR: dir, SBX_PORT: '8082', SBX_SHUTDOWN_GRACE: '3s', SBX_GRPC_ADVERTISE: 'h:1' };
    const e = serveOptions({}, env);
    assert.equal(e.port, 8082);
    assert.equal(e.shutdownGraceMs, 3000);
    assert.equal(e.bodyLimitBytes, 2 * 1024 * 1024, 'what env does not set still comes from the file');
    assert.deepEqual(e.grpc, { port: 7999, host: '127.0.0.4', advertise: 'h:1' });
    assert.equal(serveOptions({}, { ...env, SBX_EXEC_OUTPUT_BUDGET: '1048576' }).execOutputBudgetBytes, 1024 * 1024);
    const f = serveOptions({ port: 9001, shutdownGrace: 5000, grpcPort: 7000, bodyLimit: 10, execOutputBudget: 4096 }, env);
    assert.equal(f.execOutputBudgetBytes, 4096);
    assert.equal(f.port, 9001);
    assert.equal(f.shutdownGraceMs, 5000);
    assert.equal(f.bodyLimitBytes, 10);
    assert.equal(f.grpc?.port, 7000);
    // A Manager (new Manager(loadConfig())) accepts a file with a server: section.
    assert.equal(loadConfig({ file, env: {} }).name, 'opts-file');

    // serve() started from nothing but the file answers where the file said.
    const live = join(dir, 'live.yaml');
    writeFileSync(live, `name: opts-live-${process.pid}\ncleanupInterval: 0\nserver:\n  host: 127.0.0.1\n  port: 0\n  bodyLimit: 1k\n`);
    const server = await serve({
      ...serveOptions({ config: live }, { SBX_DATA_DIR: join(dir, 'live-data') }),
      logger: pino({ level: 'silent' }),
      print: () => undefined,
    });
    try {
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const big = await fetch(`${server.url}/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${server.adminKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'x'.repeat(2000), role: 'user' }),
      });
      assert.equal(big.status, 413, 'the file’s bodyLimit: 1k is in force');
    } finally {
      await server.close();
    }
  });

  test('server: section errors name the key and line; …Ms keys are refused with the file spelling', () => {
    const bad = (yaml: string) => {
      const file = join(dir, `bad-${Math.random().toString(36).slice(2)}.yaml`);
      writeFileSync(file, yaml);
      return { file, run: () => serveOptions({ config: file }, { SBX_DATA_DIR: dir }) };
    };
    const ms = bad('server:\n  port: 7070\n  shutdownGraceMs: 10000\n');
    assert.throws(
      ms.run,
      (e) => isSbxError(e, 'invalid_argument') && /shutdownGrace: 10s/.test((e as Error).message) && (e as Error).message.includes(`${ms.file}:3`),
    );
    const port = bad('server:\n  host: 127.0.0.1\n  port: 70000\n');
    assert.throws(
      port.run,
      (e) => isSbxError(e, 'invalid_argument') && /server\.port/.test((e as Error).message) && (e as Error).message.includes(`${port.file}:3`),
    );
    const dur = bad('server:\n  shutdownGrace: soon\n');
    assert.throws(dur.run, (e) => isSbxError(e, 'invalid_argument') && /server\.shutdownGrace/.test((e as Error).message));
    const unknown = bad('server:\n  hots: 127.0.0.1\n');
    assert.throws(unknown.run, (e) => isSbxError(e, 'invalid_argument') && /hots/.test((e as Error).message));
    const grpc = bad('server:\n  grpc: { host: 172.17.0.1 }\n');
    assert.throws(grpc.run, (e) => isSbxError(e, 'invalid_argument') && /server\.grpc\.port/.test((e as Error).message));
  });

  test('publicUrl and proxyDomain: flags over SBX_PUBLIC_URL / SBX_PROXY_DOMAIN over the file; serve() points box.proxy() at them, else at its own URL', async () => {
    const file = join(dir, 'proxy.yaml');
    writeFileSync(file, 'server:\n  publicUrl: https://file.example.com\n  proxyDomain: file.example.com\n');
    const fromFile = serveOptions({ config: file }, { SBX_DATA_DIR: dir });
    assert.equal(fromFile.publicUrl, 'https://file.example.com');
    assert.equal(fromFile.proxyDomain, 'file.example.com');
    const env = { SBX_DATA_DIR: dir, SBX_PUBLIC_URL: 'https://env.example.com', SBX_PROXY_DOMAIN: 'env.example.com' };
    const fromEnv = serveOptions({ config: file }, env);
    assert.equal(fromEnv.publicUrl, 'https://env.example.com');
    assert.equal(fromEnv.proxyDomain, 'env.example.com');
    const flags = serveOptions({ config: file, publicUrl: 'https://flag.example.com', proxyDomain: 'flag.example.com' }, env);
    assert.equal(flags.publicUrl, 'https://flag.example.com');
    assert.equal(flags.proxyDomain, 'flag.example.com');
    await assert.rejects(
      serve({ publicUrl: 'ftp://x', port: 0, dataDir: dir }),
      (e) => isSbxError(e, 'invalid_argument') && /publicUrl/.test((e as Error).message),
    );
  });

  test('two servers over one Manager: each issues its own URLs; box.proxy() follows the latest still open; closing one leaves the other', async () => {
    const ts = await startTestServer('proxyurl');
    const second = await serve({ manager: ts.manager, dataDir: ts.dataDir, port: 0, logger: pino({ level: 'silent' }), proxyDomain: 'two.example.com' });
    try {
      const box = await ts.manager.create({ image: IMAGE, ports: [{ containerPort: 8080 }] });
      const pathUrl = `${ts.url}/v1/boxes/${box.id}/ports/8080/x`;
      const hostUrl = `http://8080-${box.id}.two.example.com:${second.port}/x`;
      const urlFrom = async (base: string) => {
        const res = await fetch(`${base}/v1/boxes/${box.id}/proxy-url`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ts.admin}`, 'content-type': 'application/json' },
          body: JSON.stringify({ port: 8080, path: '/x' }),
        });
        assert.equal(res.status, 200);
        return ((await res.json()) as { url: string }).url;
      };
      assert.equal(await urlFrom(ts.url), pathUrl, 'the first server: its own listening URL');
      assert.equal(await urlFrom(second.url), hostUrl, 'the second: its own URL and proxy domain');
      assert.equal(await box.proxy(8080, '/x'), hostUrl, 'the library: the server registered last');
      await second.close();
      assert.equal(await box.proxy(8080, '/x'), pathUrl, 'the first server is still there');
      assert.equal(await urlFrom(ts.url), pathUrl);
    } finally {
      await second.close();
      await ts.dispose();
    }
  });

  test('a non-loopback address without TLS is refused', async () => {
    await assert.rejects(
      serve({ host: '0.0.0.0', port: 0, dataDir: dir, config: { cleanupIntervalMs: 0 }, logger: pino({ level: 'silent' }), print: () => undefined }),
      (e) => isSbxError(e, 'invalid_argument') && /tls/.test((e as Error).message),
    );
  });

  test('TLS: the API is served over https with the given certificate', async () => {
    const { keyFile: key, certFile: cert } = selfSignedCert(dir, '127.0.0.1');
    const t = await startTestServer('tls', { serve: { tls: { certFile: cert, keyFile: key } } });
    try {
      assert.match(t.url, /^https:\/\/127\.0\.0\.1:\d+$/);
      const body = await new Promise<{ status: number; text: string; id: string | undefined }>((resolve, reject) => {
        const u = new URL(t.url);
        const req = request(
          {
            host: u.hostname,
            port: u.port,
            path: '/v1/keys',
            headers: { authorization: `Bearer ${t.admin}`, 'x-request-id': 'trace-42' },
            rejectUnauthorized: false,
          },
          (res) => {
            let text = '';
            res.on('data', (d: Buffer) => (text += d.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text, id: res.headers['x-request-id'] as string | undefined }));
          },
        );
        req.on('error', reject);
        req.end();
      });
      assert.equal(body.status, 200, body.text);
      assert.equal(body.id, 'trace-42', 'a well-formed x-request-id is echoed');
      assert.ok(JSON.parse(body.text).keys.length >= 1);
    } finally {
      await t.dispose();
    }
  });

  test('request ids: a random one unless the caller gives a well-formed one', async () => {
    const t = await startTestServer('reqid');
    try {
      const a = await t.call('GET', '/healthz', { key: null });
      assert.match(a.headers.get('x-request-id') ?? '', /^[0-9a-f]{16}$/);
      const b = await t.call('GET', '/healthz', { key: null, headers: { 'x-request-id': 'bad id with spaces' } });
      assert.match(b.headers.get('x-request-id') ?? '', /^[0-9a-f]{16}$/);
    } finally {
      await t.dispose();
    }
  });
});
