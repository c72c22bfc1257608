// A stuck API server gives errors, not calls that never return: the runtime's reads (get, list)
// fail runtime_unavailable once they waited answerTimeoutMs, and free their connection, while a
// write waits for its answer. The server is a real TLS server that takes requests and holds them.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { selfSignedCert } from '../../testing/tls.js';
import { waitFor, within } from '../../testing/wait.js';
import { KubernetesRuntime } from './runtime.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-kube-stuck-'));
const held: Array<{ req: IncomingMessage; res: ServerResponse; closed: boolean }> = [];
let server: https.Server;
let kubeconfig: string;

before(async () => {
  const { keyFile, certFile } = selfSignedCert(dir, 'api', 'IP:127.0.0.1');
  const cert = readFileSync(certFile, 'utf8');
  server = https.createServer({ key: readFileSync(keyFile, 'utf8'), cert }, (req, res) => {
    const entry = { req, res, closed: false };
    res.on('close', () => (entry.closed = true));
    held.push(entry);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    `apiVersion: v1
kind: Config
clusters: [{ name: c, cluster: { server: 'https://127.0.0.1:${(server.address() as AddressInfo).port}', certificate-authority-data: ${Buffer.from(cert).toString('base64')} } }]
users: [{ name: u, user: { token: t } }]
contexts: [{ name: x, context: { cluster: c, user: u, namespace: sbx } }]
current-context: x
`,
  );
});

after(() => {
  server.closeAllConnections();
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

test('reads of a stuck API server fail runtime_unavailable after answerTimeoutMs, a write waits for its answer', async () => {
  const rt = new KubernetesRuntime(`k8s://?kubeconfig=${encodeURIComponent(kubeconfig)}`, { answerTimeoutMs: 1500 });
  try {
    const unavailable = (e: unknown) => {
      assert.ok(isSbxError(e, 'runtime_unavailable'), String(e));
      assert.match(e.message, /did not answer .*no answer to GET \/api\/v1\/namespaces\/sbx\/pods.* within 1500 ms/);
      return true;
    };
    // A write, held by the server, must not be cut by the deadline.
    const removal = rt.remove('box-held', { force: true });
    await waitFor(() => held.some((h) => h.req.method === 'DELETE'), { what: 'the removal to reach the server' });
    await within(assert.rejects(rt.inspect('box-a'), unavailable), 'the inspect to fail');
    await within(assert.rejects(rt.list({}), unavailable), 'the list to fail');
    // Each read's connection was closed: nothing of it stays held.
    for (const h of held.filter((x) => x.req.method === 'GET')) await waitFor(() => h.closed, { what: `the connection of GET ${h.req.url} to close` });
    const del = held.find((h) => h.req.method === 'DELETE')!;
    assert.equal(del.closed, false, 'the removal still waits for its answer');
    del.res.writeHead(404, { 'content-type': 'application/json' });
    del.res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'pods "box-held" not found', reason: 'NotFound', code: 404 }));
    await within(
      removal.then(
        () => 'done',
        (e: unknown) => (isSbxError(e, 'not_found') ? 'done' : Promise.reject(e)),
      ),
      'the removal to settle',
    );
  } finally {
    await rt.close();
  }
});

test('answerTimeoutMs must be a positive whole number of ms', () => {
  for (const bad of [0, -1, 1.5, Number.NaN]) {
    assert.throws(
      () => new KubernetesRuntime(`k8s://?kubeconfig=${encodeURIComponent(kubeconfig)}`, { answerTimeoutMs: bad }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'answerTimeoutMs',
    );
  }
});
