// TLS to the API server is verified against the kubeconfig's CA whatever the process says:
// with NODE_TLS_REJECT_UNAUTHORIZED=0 set (a common "fix" elsewhere in a process), an impostor
// with another certificate must still get no request, so never the bearer token. The typed API
// client, the watch and the WebSockets each make their own connections, so each is tried.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { KubernetesRuntime } from './runtime.js';
import { selfSignedCert } from '../../testing/tls.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-kube-tls-'));
const seen: string[] = [];
let server: https.Server;
let rt: KubernetesRuntime;

function selfSigned(name: string): { key: string; cert: string } {
  const { keyFile, certFile } = selfSignedCert(dir, name, 'IP:127.0.0.1');
  return { key: readFileSync(keyFile, 'utf8'), cert: readFileSync(certFile, 'utf8') };
}

before(async () => {
  process.env['NODE_TLS_REJECT_UNAUTHORIZED'] = '0';
  const trusted = selfSigned('trusted-ca');
  const impostor = selfSigned('impostor');
  server = https.createServer({ key: impostor.key, cert: impostor.cert }, (req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    res.end('{}');
  });
  server.on('upgrade', (req, socket) => {
    seen.push(`upgrade ${req.url} ${req.headers.authorization ?? ''}`);
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    `apiVersion: v1
kind: Config
clusters: [{ name: c, cluster: { server: 'https://127.0.0.1:${(server.address() as AddressInfo).port}', certificate-authority-data: ${Buffer.from(trusted.cert).toString('base64')} } }]
users: [{ name: u, user: { token: SECRET-BEARER-TOKEN } }]
contexts: [{ name: x, context: { cluster: c, user: u, namespace: sbx } }]
current-context: x
`,
  );
  rt = new KubernetesRuntime(`k8s://?kubeconfig=${encodeURIComponent(kubeconfig)}`);
});

after(async () => {
  delete process.env['NODE_TLS_REJECT_UNAUTHORIZED'];
  await rt.close();
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

test('API calls, the watch and the WebSockets refuse a server the kubeconfig does not trust, even with NODE_TLS_REJECT_UNAUTHORIZED=0', async () => {
  await assert.rejects(rt.version(), (e) => isSbxError(e));
  await assert.rejects(rt.inspect('any'), (e) => isSbxError(e));
  const ac = new AbortController();
  await assert.rejects(
    (async () => {
      for await (const _ of rt.events({ signal: ac.signal })) break;
    })(),
    (e) => isSbxError(e),
  );
  ac.abort();
  await assert.rejects(rt.dialPort('any', 80), (e) => isSbxError(e));
  assert.deepEqual(seen, [], 'no request reached the impostor');
});
