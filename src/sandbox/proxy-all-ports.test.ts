/**
 * `proxyAllPorts` on the real engine: a service started after create, on a port the box never
 * listed, is reached through `dial` (the box's own address); without the option it is not, and
 * nothing more is published on the host either way.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv } from '../testing/env.js';
import type { ManagedBox } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-all-ports-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const manager = new Manager({
  name: `allports-${process.pid}`,
  pools: [{ name: 'local', addr: testEnv.engineAddr }],
  dataDir,
  cleanupIntervalMs: 0,
  logger: pino({ level: 'silent' }),
});

after(async () => {
  const leaked = await engine.list({ labels: managerSelector(manager.config.name) });
  await Promise.all(leaked.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await manager.close();
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    leaked.map((c) => c.name),
    [],
    'containers left behind',
  );
});

async function httpGet(socket: Duplex, path: string): Promise<string> {
  socket.write(`GET ${path} HTTP/1.0\r\nHost: box\r\n\r\n`);
  let text = '';
  for await (const chunk of socket) text += (chunk as Buffer).toString();
  return text;
}

async function serving(box: ManagedBox): Promise<void> {
  await box.exec(['sh', '-c', 'mkdir -p /tmp/www && echo late-service > /tmp/www/index.html']);
  const s = await box.stream(['httpd', '-f', '-p', '8081', '-h', '/tmp/www']);
  s.stdin.end();
  await box.exec(['sh', '-c', 'for i in $(seq 50); do nc -z 127.0.0.1 8081 && exit 0; sleep 0.1; done; exit 1']);
}

test('a box with proxyAllPorts: a service started later on an unlisted port is dialed; nothing is published', async () => {
  const box = (await manager.create({ image: testEnv.baseImage, proxyAllPorts: true })) as ManagedBox;
  try {
    await serving(box);
    const reply = await httpGet(await box.dial(8081), '/index.html');
    assert.match(reply, /^HTTP\/1\.[01] 200/);
    assert.match(reply, /late-service/);
    assert.deepEqual((await engine.inspect(box.containerId)).ports, []);
  } finally {
    await box.remove();
  }
});

test('without it the same port is port_not_exposed', async () => {
  const box = (await manager.create({ image: testEnv.baseImage })) as ManagedBox;
  try {
    await serving(box);
    await assert.rejects(box.dial(8081), (err: unknown) => isSbxError(err, 'not_available') && err.details?.['reason'] === 'port_not_exposed');
  } finally {
    await box.remove();
  }
});
