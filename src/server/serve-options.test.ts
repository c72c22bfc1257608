/**
 * serve() and `sbx serve` options: flags over SBX_* over defaults, TLS on a real socket,
 * plain HTTP refused off loopback, request ids.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { serveOptions } from '../cli/serve.js';
import { isSbxError } from '../errors.js';
import { serve } from './index.js';
import { startTestServer } from './test-support.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-serve-opts-'));
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

  test('a non-loopback address without TLS is refused', async () => {
    await assert.rejects(
      serve({ host: '0.0.0.0', port: 0, dataDir: dir, config: { cleanupIntervalMs: 0 }, logger: pino({ level: 'silent' }), print: () => undefined }),
      (e) => isSbxError(e, 'invalid_argument') && /tls/.test((e as Error).message),
    );
  });

  test('TLS: the API is served over https with the given certificate', async () => {
    const key = join(dir, 'key.pem');
    const cert = join(dir, 'cert.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1'], {
      stdio: 'ignore',
    });
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
