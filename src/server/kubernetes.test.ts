/**
 * `sbx serve` with a Kubernetes pool, driven by the SDK over real HTTP and WebSockets, boxes as
 * real pods of the test cluster (skipped with the reason when there is none): a pool added through
 * the API with the agent image, create / exec / stream, the authenticated port proxy reaching a
 * service in a pod through the API server's port-forward, VNC through the viewer's bridge, and stop
 * removing the box.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket from 'ws';
import { Sbx } from '../client/index.js';
import { isSbxError } from '../errors.js';
import type { KubernetesRuntime } from '../runtime/kubernetes/runtime.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable } from '../testing/kube-cluster.js';
import { GRACEFUL_CMD } from '../sandbox/box-spec.js';
import { managerSelector } from '../sandbox/labels.js';
import { testEnv } from '../testing/env.js';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const why = await unavailable();
// A service on :3002 inside the box: answers what it was asked.
const SERVICE = `require('http').createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ url: req.url, pod: require('os').hostname() }));
}).listen(3002, '0.0.0.0', () => console.log('listening'));`;

/** The VNC server's first message through the viewer's WebSocket bridge, retried while the desktop starts. */
async function rfbGreeting(url: string, key: string): Promise<string> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const got = await new Promise<string>((resolve) => {
      const ws = new WebSocket(url, { headers: { authorization: `Bearer ${key}` } });
      const done = (text: string) => {
        ws.terminate();
        resolve(text);
      };
      ws.once('message', (d: Buffer) => done(d.toString()));
      ws.once('error', (err) => done(`error: ${err.message}`));
      ws.once('close', (code) => done(`closed: ${code}`));
      setTimeout(() => done('timeout'), 5000);
    });
    if (got.startsWith('RFB') || Date.now() > deadline) return got;
    await sleep(500);
  }
}

describe('sbx serve with a Kubernetes pool', { skip: why ?? false }, () => {
  let ts: TestServer;
  let sbx: Sbx;
  let cluster: KubernetesRuntime;

  before(async () => {
    ts = await startTestServer('kube');
    sbx = new Sbx({ url: ts.url, apiKey: ts.admin });
    cluster = openTestKube();
  });

  after(async () => {
    const left = await cluster.list({ labels: managerSelector(ts.manager.config.name) });
    await Promise.all(left.map((p) => cluster.remove(p.id, { force: true }).catch(() => undefined)));
    await ts.dispose();
    await cluster.close();
    assert.deepEqual(
      left.map((p) => p.id),
      [],
      'pods left behind by the server tests',
    );
  });

  test('a pool added over the API runs boxes as pods: exec, stream, the port proxy, stop', async () => {
    const pool = await sbx.addPool({ name: 'kube', addr: testKubeAddress(), agentImage: testAgentImage, readyTimeoutMs: 60_000 });
    assert.equal(pool.connected, true);
    assert.equal(pool.agentImage, testAgentImage);

    const box = await sbx.create({ pool: 'kube', image: testEnv.testImage, user: 'sandbox', ports: [{ containerPort: 3002 }] });
    assert.equal((await box.info()).execPath, 'agent');
    const argv = ['a b', '$(id)', `"'`];
    assert.equal((await box.exec(['printf', '<%s>', ...argv])).stdout, argv.map((a) => `<${a}>`).join(''));
    assert.equal((await box.exec(['id', '-un'], { user: 'root' })).stdout, 'root\n');

    // The service runs in a stream (WebSocket exec through the server) while the proxy reaches it.
    const service = await box.stream(['node', '-e', SERVICE]);
    service.stdin.end();
    await new Promise<void>((resolve, reject) => {
      service.stdout.on('data', (c: Buffer) => c.toString().includes('listening') && resolve());
      service.wait().then(() => reject(new Error('the in-box service exited')), reject);
    });
    const proxied = await fetch(`${ts.url}/v1/boxes/${box.id}/ports/3002/hello?x=1`, { headers: { authorization: `Bearer ${ts.admin}` } });
    assert.equal(proxied.status, 200);
    const body = (await proxied.json()) as { url: string; pod: string };
    assert.equal(body.url, '/hello?x=1');
    assert.equal(body.pod, (await box.info()).containerId, 'answered from inside the pod');
    assert.equal((await fetch(`${ts.url}/v1/boxes/${box.id}/ports/3002/`)).status, 401, 'the proxy wants a key');
    // A signed URL (box.proxy) reaches it without a key: a redirect that sets the token's cookie.
    const signed = await fetch(await box.proxy(3002, '/signed', { signed: true }), { redirect: 'manual' });
    assert.equal(signed.status, 303);
    const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0]!;
    const followed = await fetch(new URL(signed.headers.get('location')!, ts.url), { headers: { cookie } });
    assert.equal(((await followed.json()) as { url: string }).url, '/signed');

    // VNC: the viewer's bridge reaches the desktop's VNC server in a pod (the desktop image's
    // ENTRYPOINT starts it; with the agent the command must name it: no image config is read).
    const desk = await sbx.create({
      pool: 'kube',
      image: 'sbx-desktop:latest',
      vnc: true,
      cmd: ['/bin/sh', '/usr/local/bin/sbx-desktop', ...GRACEFUL_CMD],
    });
    assert.equal(await rfbGreeting(`${ts.url.replace(/^http/, 'ws')}/v1/boxes/${desk.id}/vnc/websockify`, ts.admin), 'RFB 003.008\n');
    await desk.remove();

    await box.stop();
    assert.equal(box.status, 'stopped');
    await assert.rejects(box.info(), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual(await cluster.list({ labels: managerSelector(ts.manager.config.name) }), []);
  });

  // Issue #27: a pod has no freezer and no commit; over HTTP that is not_available, 503.
  test('pause and archive of a pod-box answer 503 not_available naming the reason; resume of a running pod-box does nothing', async () => {
    if (!(await sbx.pools()).some((p) => p.name === 'kube'))
      await sbx.addPool({ name: 'kube', addr: testKubeAddress(), agentImage: testAgentImage, readyTimeoutMs: 60_000 });
    const box = await sbx.create({ pool: 'kube', image: testEnv.baseImage });
    try {
      const pod = (await box.info()).containerId;
      for (const [action, reason] of [
        ['pause', 'pause_unsupported'],
        ['archive', 'archive_unsupported'],
      ] as const) {
        const res = await fetch(`${ts.url}/v1/boxes/${box.id}/${action}`, { method: 'POST', headers: { authorization: `Bearer ${ts.admin}` } });
        const body = (await res.json()) as { error: { code: string; details?: Record<string, unknown> } };
        assert.deepEqual([res.status, body.error.code, body.error.details?.['reason']], [503, 'not_available', reason], action);
      }
      await assert.rejects(box.pause(), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'pause_unsupported', 'the SDK says so too');
      await box.resume();
      const info = await box.info();
      assert.deepEqual([info.status, info.containerId], ['running', pod], 'the same pod, running');
      assert.equal((await box.exec(['echo', 'still'])).stdout, 'still\n');
    } finally {
      await box.remove();
    }
  });

  test("stats of a pod-box: memory, its limit and pids from the pod's cgroup, CPU null (not measured), over HTTP and the SDK", async () => {
    if (!(await sbx.pools()).some((p) => p.name === 'kube'))
      await sbx.addPool({ name: 'kube', addr: testKubeAddress(), agentImage: testAgentImage, readyTimeoutMs: 60_000 });
    const box = await sbx.create({ pool: 'kube', image: testEnv.baseImage, memory: 80 * 1024 * 1024 });
    try {
      const res = await fetch(`${ts.url}/v1/boxes/${box.id}/stats`, { headers: { authorization: `Bearer ${ts.admin}` } });
      assert.equal(res.status, 200);
      const s = (await res.json()) as {
        status: string;
        cpuPercent: number | null;
        memoryBytes: number | null;
        memoryLimitBytes: number | null;
        pids: number | null;
      };
      assert.equal(s.status, 'running');
      assert.equal(s.cpuPercent, null);
      assert.ok(s.memoryBytes! > 0, `memoryBytes ${s.memoryBytes}`);
      assert.equal(s.memoryLimitBytes, 80 * 1024 * 1024);
      assert.ok(s.pids! >= 1);
      assert.equal((await box.stats()).cpuPercent, null);
    } finally {
      await box.remove();
    }
  });
});
