/**
 * The e2b control plane against a real sbx server and engine, with the real `e2b` SDK (2.51) and
 * an older one (2.31, which uses POST /sandboxes and POST /sandboxes/:id/connect) as clients.
 * Sandbox.create contacts only the control plane, so no envd is needed here.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import * as e2b from 'e2b';
import * as e2bV231 from 'e2b-v231';
import { DockerRuntime } from '../../../runtime/docker/runtime.js';
import { managerSelector } from '../../../sandbox/labels.js';
import { startTestServer } from '../../../testing/server.js';
import type { TestServer } from '../../../testing/server.js';
import { ManualClock } from '../../../testing/clock.js';
import { testEnv } from '../../../testing/env.js';
import { untilEngineSays } from '../../../testing/freezer.js';
import { holdRemoves } from '../../../testing/held-remove.js';
import { waitFor, within } from '../../../testing/wait.js';
import { envdAccessToken } from '../access-token.js';
import { ENVD_VERSION } from '../envd/version.js';

const SDKS = [
  { name: 'e2b 2.51', mod: e2b as unknown as typeof e2b },
  { name: 'e2b 2.31', mod: e2bV231 as unknown as typeof e2b },
];
const TEMPLATES = { base: testEnv.baseImage, test: testEnv.testImage };

let t: TestServer;
let alice: string;
let bob: string;
const engine = new DockerRuntime(testEnv.engineAddr);

before(async () => {
  t = await startTestServer('e2b-api', { serve: { e2b: { templates: TEMPLATES } } });
  alice = (await t.server.keys.create({ name: 'alice', role: 'user' })).e2bKey;
  bob = (await t.server.keys.create({ name: 'bob', role: 'user' })).e2bKey;
});
after(async () => {
  await t.dispose();
  await engine.close();
});

/** The SDK's options, given explicitly (no E2B_* variables in this process). */
function opts(apiKey: string, url = t.url) {
  return { apiUrl: `${url}/e2b/api`, sandboxUrl: `${url}/e2b/envd`, apiKey, requestTimeoutMs: 60_000 };
}

/** The envd access token a Sandbox holds (protected in the SDK's types; the SDK sends it to envd). */
function tokenOf(s: object): string {
  return (s as { envdAccessToken: string }).envdAccessToken;
}

async function raw(method: string, path: string, o: { key?: string | null; body?: unknown } = {}) {
  const headers: Record<string, string> = {};
  const key = o.key === undefined ? alice : o.key;
  if (key !== null) headers['x-api-key'] = key;
  if (o.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${t.url}/e2b/api${path}`, { method, headers, ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? (JSON.parse(text) as any) : undefined }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

for (const { name, mod } of SDKS) {
  const { Sandbox, AuthenticationError, SandboxNotFoundError, SandboxError } = mod;

  describe(`${name} against sbx`, () => {
    const run = `r${process.pid}${name.replace(/\D/g, '')}`;

    test('Sandbox.create answers once the box runs, with its template, metadata and env on the box', async () => {
      const sbx = await Sandbox.create('base', { ...opts(alice), envs: { GREETING: 'hello e2b' }, metadata: { run, role: 'create' }, timeoutMs: 120_000 });
      try {
        const box = await t.manager.get(sbx.sandboxId);
        assert.equal(box.status, 'running');
        assert.equal(box.owner, 'alice');
        const c = await engine.inspect(box.containerId);
        assert.equal(c.running, true);
        assert.equal(c.labels['sbx.label.e2b.template'], 'base');
        assert.equal(c.labels['sbx.label.e2b.meta.run'], run);
        assert.equal(c.labels['sbx.policy'], 'session');
        assert.equal(c.labels['sbx.idle-timeout-ms'], '0');
        assert.equal(c.labels['sbx.max-lifetime-ms'], '120000');
        assert.equal((await box.exec(['sh', '-c', 'printf %s "$GREETING"'])).stdout, 'hello e2b');
        assert.equal(tokenOf(sbx), await envdAccessToken(t.manager, sbx.sandboxId, alice.slice(4, 20)), 'the token of the key that created it');
      } finally {
        assert.equal(await sbx.kill(), true);
      }
    });

    test('getInfo: template, metadata, state, start and end, resources, envd version', async () => {
      const created = Date.now();
      const sbx = await Sandbox.create('base', { ...opts(alice), metadata: { run, role: 'info' }, timeoutMs: 90_000 });
      try {
        const info = await Sandbox.getInfo(sbx.sandboxId, opts(alice));
        assert.equal(info.sandboxId, sbx.sandboxId);
        assert.equal(info.templateId, 'base');
        assert.equal(info.name, 'base');
        assert.deepEqual(info.metadata, { run, role: 'info' });
        assert.equal(info.state, 'running');
        assert.equal(info.envdVersion, ENVD_VERSION);
        assert.ok(Math.abs(info.startedAt.getTime() - created) < 10_000);
        assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 90_000);
        assert.ok(info.cpuCount >= 1 && Number.isInteger(info.memoryMB));
        assert.deepEqual(await sbx.getInfo(), info);
      } finally {
        await sbx.kill();
      }
    });

    test('Sandbox.list: a metadata filter, pages of one with nextToken, state paused lists nothing', async () => {
      const made = await Promise.all([1, 2].map(() => Sandbox.create('base', { ...opts(alice), metadata: { run, role: 'list' } })));
      try {
        const other = await Sandbox.create('base', { ...opts(alice), metadata: { run, role: 'unlisted' } });
        try {
          const all = await Sandbox.list({ ...opts(alice), query: { metadata: { run, role: 'list' } } }).nextItems();
          assert.deepEqual(all.map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort());
          const pages = Sandbox.list({ ...opts(alice), query: { metadata: { run, role: 'list' } }, limit: 1 });
          const first = await pages.nextItems();
          assert.equal(first.length, 1);
          assert.equal(pages.hasNext, true);
          assert.ok(pages.nextToken);
          const second = await pages.nextItems();
          assert.equal(second.length, 1);
          assert.equal(pages.hasNext, false);
          assert.notEqual(first[0]!.sandboxId, second[0]!.sandboxId);
          assert.equal(first[0]!.templateId, 'base');
          assert.deepEqual(first[0]!.metadata, { run, role: 'list' });
          const paused = await Sandbox.list({ ...opts(alice), query: { metadata: { run }, state: ['paused'] } }).nextItems();
          assert.deepEqual(paused, []);
        } finally {
          await other.kill();
        }
      } finally {
        await Promise.all(made.map((s) => s.kill()));
      }
    });

    test('setTimeout moves the deadline from now; connect from a second SDK instance only extends it', async () => {
      const sbx = await Sandbox.create('base', { ...opts(alice), timeoutMs: 60_000 });
      try {
        const before = Date.now();
        await sbx.setTimeout(600_000);
        const end = (await sbx.getInfo()).endAt.getTime();
        assert.ok(end >= before + 600_000 - 1_000 && end <= Date.now() + 600_000 + 1_000);
        const again = await Sandbox.connect(sbx.sandboxId, { ...opts(alice), timeoutMs: 30_000 });
        assert.equal(again.sandboxId, sbx.sandboxId);
        assert.equal(tokenOf(again), tokenOf(sbx));
        assert.equal((await again.getInfo()).endAt.getTime(), end, 'a shorter connect timeout leaves the deadline');
        await Sandbox.connect(sbx.sandboxId, { ...opts(alice), timeoutMs: 1_200_000 });
        assert.ok((await sbx.getInfo()).endAt.getTime() > end + 500_000, 'a longer one moves it');
        await Sandbox.setTimeout(sbx.sandboxId, 5_000, opts(alice));
        assert.ok((await sbx.getInfo()).endAt.getTime() < Date.now() + 6_000, 'setTimeout may shorten it');
      } finally {
        await sbx.kill();
      }
    });

    test('kill removes the box from the engine; a second kill is false', async () => {
      const sbx = await Sandbox.create('base', opts(alice));
      const box = await t.manager.get(sbx.sandboxId);
      assert.equal(await Sandbox.kill(sbx.sandboxId, opts(alice)), true);
      await assert.rejects(engine.inspect(box.containerId));
      assert.equal(await sbx.kill(), false);
      await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts(alice)), SandboxNotFoundError);
    });

    test('pause: 204, then 409 (the SDK: false); paused in getInfo and list; no deadline while paused; connect resumes with a new one; kill of a paused sandbox', async () => {
      const sbx = await Sandbox.create('base', { ...opts(alice), metadata: { run, role: 'pause' }, timeoutMs: 60_000 });
      try {
        const box = await t.manager.get(sbx.sandboxId);
        assert.equal(await Sandbox.betaPause(sbx.sandboxId, opts(alice)), true);
        await untilEngineSays(engine, box.containerId, 'paused', "the engine's freezer to say paused");
        assert.equal(await sbx.betaPause(), false, 'already paused');
        assert.equal((await sbx.getInfo()).state, 'paused');
        assert.equal(box.maxLifetimeMs, 0, 'a paused sandbox keeps no deadline: its timeout neither kills nor pauses it');
        const query = (state: Array<'running' | 'paused'>) => ({ ...opts(alice), query: { metadata: { run, role: 'pause' }, state } });
        assert.deepEqual(
          (await Sandbox.list(query(['paused'])).nextItems()).map((s) => [s.sandboxId, s.state]),
          [[sbx.sandboxId, 'paused']],
        );
        assert.deepEqual(await Sandbox.list(query(['running'])).nextItems(), []);

        const before = Date.now();
        const again = await Sandbox.connect(sbx.sandboxId, { ...opts(alice), timeoutMs: 120_000 });
        assert.equal(again.sandboxId, sbx.sandboxId);
        await untilEngineSays(engine, box.containerId, 'running');
        const info = await sbx.getInfo();
        assert.equal(info.state, 'running');
        assert.ok(info.endAt.getTime() >= before + 120_000 - 1_000, 'connect gave it the timeout it asked for');

        assert.equal(await sbx.pause(), true);
        assert.equal(await sbx.kill(), true, 'a paused sandbox is killed like any other');
        await assert.rejects(engine.inspect(box.containerId));
        await assert.rejects(Sandbox.betaPause(sbx.sandboxId, opts(alice)), SandboxNotFoundError);
      } finally {
        await sbx.kill();
      }
    });

    test("snapshots: createSnapshot keeps the source running; Sandbox.create(id or name) has its files; listSnapshots by sandbox and name; another key's is invisible; deleteSnapshot true then false", async () => {
      const src = await Sandbox.create('base', { ...opts(alice), metadata: { run, role: 'snap-src' } });
      const made: Array<InstanceType<typeof Sandbox>> = [];
      let snapshotId: string | undefined;
      try {
        await src.files.write('/tmp/kept.txt', `kept by ${run}`);
        const snapName = `${run}-snap`;
        const snap = await src.createSnapshot({ name: snapName });
        snapshotId = snap.snapshotId;
        assert.match(snapshotId, /^snap-[0-9a-f]{12}$/);
        assert.deepEqual(snap.names, [snapName]);
        assert.equal((await src.getInfo()).state, 'running', 'the source sandbox keeps running');
        assert.equal(await src.files.read('/tmp/kept.txt'), `kept by ${run}`);

        const mine = await Sandbox.listSnapshots({ ...opts(alice), sandboxId: src.sandboxId }).nextItems();
        assert.deepEqual(mine, [{ snapshotId, names: [snapName] }]);
        assert.deepEqual(await Sandbox.listSnapshots({ ...opts(alice), name: snapName }).nextItems(), mine);
        assert.deepEqual(await src.listSnapshots().nextItems(), mine);

        // Sandbox.create takes the snapshot id, or its name, as the template.
        for (const template of [snapshotId, snapName]) {
          const copy = await Sandbox.create(template, opts(alice));
          made.push(copy);
          assert.equal(await copy.files.read('/tmp/kept.txt'), `kept by ${run}`, template);
          assert.equal((await copy.getInfo()).templateId, template);
        }

        // Bob's key: not listed, not a template, not deletable (the SDK's false); still alice's.
        assert.deepEqual(await Sandbox.listSnapshots({ ...opts(bob), sandboxId: src.sandboxId }).nextItems(), []);
        for (const template of [snapshotId, snapName]) {
          await assert.rejects(Sandbox.create(template, opts(bob)), (e) => e instanceof SandboxError && /404: template '.*' not found/.test(e.message));
        }
        assert.equal(await Sandbox.deleteSnapshot(snapshotId, opts(bob)), false);
        await assert.rejects(Sandbox.createSnapshot(src.sandboxId, opts(bob)), SandboxNotFoundError);

        // In use by the copies: 409; once they are gone, deleted, then not found.
        await assert.rejects(Sandbox.deleteSnapshot(snapshotId, opts(alice)), (e) => e instanceof SandboxError && /409: .*remove them first/.test(e.message));
        await Promise.all(made.splice(0).map((s) => s.kill()));
        assert.equal(await Sandbox.deleteSnapshot(snapshotId, opts(alice)), true);
        assert.equal(await Sandbox.deleteSnapshot(snapshotId, opts(alice)), false);
        snapshotId = undefined;
        assert.deepEqual(await Sandbox.listSnapshots({ ...opts(alice), sandboxId: src.sandboxId }).nextItems(), []);
        await assert.rejects(Sandbox.create(snap.snapshotId, opts(alice)), (e) => e instanceof SandboxError && /404: template '.*' not found/.test(e.message));
      } finally {
        await Promise.all(made.map((s) => s.kill()));
        if (snapshotId !== undefined) await t.manager.snapshots.delete(snapshotId).catch(() => {});
        await src.kill();
      }
    });

    test('a wrong API key is an AuthenticationError', async () => {
      const wrong = `e2b_${alice.slice(4, 20)}${'0'.repeat(64)}`;
      await assert.rejects(Sandbox.create('base', opts(wrong)), AuthenticationError);
      await assert.rejects(Sandbox.list(opts('e2b_nonsense')).nextItems(), AuthenticationError);
      assert.equal((await t.manager.list({ owner: 'alice' })).length, 0);
    });

    test("another key's sandbox is invisible: list, getInfo, setTimeout, connect, kill", async () => {
      const sbx = await Sandbox.create('base', { ...opts(alice), metadata: { run, role: 'private' } });
      try {
        assert.deepEqual(await Sandbox.list({ ...opts(bob), query: { metadata: { run } } }).nextItems(), []);
        await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts(bob)), SandboxNotFoundError);
        await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 1_000, opts(bob)), SandboxNotFoundError);
        await assert.rejects(Sandbox.connect(sbx.sandboxId, opts(bob)), SandboxNotFoundError);
        assert.equal(await Sandbox.kill(sbx.sandboxId, opts(bob)), false);
        assert.equal((await sbx.getInfo()).state, 'running', 'still there for its owner');
      } finally {
        await sbx.kill();
      }
    });

    test('an unknown template and a body sbx cannot honour are refused with a readable error', async () => {
      await assert.rejects(
        Sandbox.create('no-such-template', opts(alice)),
        (e) => e instanceof SandboxError && /404: template 'no-such-template' not found/.test(e.message),
      );
      await assert.rejects(
        Sandbox.create('base', { ...opts(alice), metadata: { 'not a key': 'x' } }),
        (e) => e instanceof SandboxError && /400: metadata\.not a key/.test(e.message),
      );
      await assert.rejects(
        Sandbox.create('base', { ...opts(alice), envs: { SBX_TOKEN: 'x' } }),
        (e) => e instanceof SandboxError && /400: envVars\.SBX_TOKEN/.test(e.message),
      );
      assert.equal((await t.manager.list({ owner: 'alice' })).length, 0);
    });
  });
}

describe('the wire, without an SDK', () => {
  test('create answers 201 with e2b Sandbox fields; GET /sandboxes/:id the SandboxDetail', async () => {
    const r = await raw('POST', '/v2/sandboxes', {
      body: { templateID: 'test', timeout: 30, metadata: { k: 'v' }, secure: true, unknownExtra: 1 },
    });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    try {
      assert.deepEqual(Object.keys(r.json).sort(), [
        'alias',
        'clientID',
        'domain',
        'envdAccessToken',
        'envdVersion',
        'sandboxID',
        'templateID',
        'trafficAccessToken',
      ]);
      assert.equal(r.json.templateID, 'test');
      assert.equal(r.json.domain, null);
      const box = await t.manager.get(r.json.sandboxID);
      assert.equal(box.image, testEnv.testImage);
      assert.equal((await engine.inspect(box.containerId)).labels['sbx.max-lifetime-ms'], '30000');
      const d = await raw('GET', `/sandboxes/${r.json.sandboxID}`);
      assert.equal(d.status, 200);
      for (const k of [
        'templateID',
        'sandboxID',
        'clientID',
        'startedAt',
        'endAt',
        'state',
        'cpuCount',
        'memoryMB',
        'diskSizeMB',
        'envdVersion',
        'metadata',
        'domain',
        'envdAccessToken',
      ])
        assert.ok(k in d.json, k);
      assert.deepEqual(d.json.metadata, { k: 'v' });
    } finally {
      assert.equal((await raw('DELETE', `/sandboxes/${r.json.sandboxID}`)).status, 204);
    }
    assert.equal((await raw('DELETE', `/sandboxes/${r.json.sandboxID}`)).status, 404);
  });

  test('errors are {code: <number>, message}: 401, 400, 404, and 501 for what sbx does not serve', async () => {
    const noKey = await raw('GET', '/v2/sandboxes', { key: null });
    assert.deepEqual([noKey.status, noKey.json.code], [401, 401]);
    assert.match(noKey.json.message, /X-API-KEY/);
    const bearer = await fetch(`${t.url}/e2b/api/v2/sandboxes`, { headers: { authorization: `Bearer ${t.admin}` } });
    assert.equal(bearer.status, 200, 'a key is a key in either header (one auth hook for every key route)');
    const wrong = await raw('GET', '/v2/sandboxes', { key: 'sbxk_0000000000000000_nope' });
    assert.deepEqual([wrong.status, wrong.json.code], [401, 401], "the app's hook refuses in e2b's error body");
    for (const body of [
      {},
      { templateID: 'base', timeout: 0 },
      { templateID: 'base', timeout: 86_401 },
      { templateID: 'base', timeout: 1.5 },
      { templateID: 'base', volumeMounts: [{ name: 'v', path: '/v' }] },
      // allowOut and denyOut are served (network-policy.test.ts); a bad entry, transform rules and a proxy are not.
      { templateID: 'base', network: { allowOut: ['not_a_host'], denyOut: ['0.0.0.0/0'] } },
      { templateID: 'base', network: { rules: { 'api.example.com': [{ transform: { headers: { a: 'b' } } }] } } },
      { templateID: 'base', network: { egressProxy: { address: 'proxy.example.com:1080' } } },
      { templateID: 'base', autoPause: 'yes' },
      { templateID: 'base', metadata: { k: 1 } },
      [],
    ]) {
      const r = await raw('POST', '/v2/sandboxes', { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.code, 400);
      assert.equal(typeof r.json.message, 'string');
    }
    const unknown = await raw('GET', '/sandboxes/sb-nope');
    assert.deepEqual([unknown.status, unknown.json.code], [404, 404]);
    for (const path of ['/sandboxes/sb-nope/pause', '/sandboxes/sb-nope/resume', '/sandboxes/sb-nope/fork']) {
      assert.deepEqual((await raw('POST', path, { body: {} })).json, { code: 404, message: "sandbox 'sb-nope' not found" }, path);
    }
    assert.deepEqual((await raw('GET', '/sandboxes/sb-nope/metrics')).json, { code: 404, message: "sandbox 'sb-nope' not found" });
    for (const [method, path] of [
      ['DELETE', '/templates/base'],
      ['GET', '/templates'],
      ['POST', '/v3/templates'],
    ] as const) {
      const r = await raw(method, path, method === 'POST' ? { body: {} } : {});
      assert.deepEqual([r.status, r.json.code], [501, 501], `${method} ${path}`);
      assert.match(r.json.message, /sbx does not implement/);
    }
    const badList = await raw('GET', '/v2/sandboxes?limit=0');
    assert.deepEqual([badList.status, badList.json.code], [400, 400]);
    const badToken = await raw('GET', '/v2/sandboxes?nextToken=garbage');
    assert.equal(badToken.status, 400);
  });

  test('snapshots on the wire: 404 bodies, memory: true refused, pages of GET /snapshots with x-next-token', async () => {
    assert.deepEqual((await raw('POST', '/sandboxes/sb-nope/snapshots', { body: {} })).json, { code: 404, message: "sandbox 'sb-nope' not found" });
    assert.deepEqual((await raw('DELETE', '/templates/snap-000000000000')).json, { code: 404, message: "snapshot 'snap-000000000000' not found" });
    const src = await raw('POST', '/v2/sandboxes', { body: { templateID: 'base' } });
    assert.equal(src.status, 201);
    const id = src.json.sandboxID as string;
    const taken: string[] = [];
    try {
      const full = await raw('POST', `/sandboxes/${id}/snapshots`, { body: { memory: true } });
      assert.deepEqual([full.status, full.json.code], [400, 400]);
      assert.match(full.json.message, /memory/);
      for (const body of [{}, { name: 'second', memory: false }]) {
        const r = await raw('POST', `/sandboxes/${id}/snapshots`, { body });
        assert.equal(r.status, 201, JSON.stringify(r.json));
        assert.deepEqual(Object.keys(r.json).sort(), ['names', 'snapshotID']);
        taken.push(r.json.snapshotID);
      }
      const first = await raw('GET', `/snapshots?sandboxID=${id}&limit=1`);
      assert.equal(first.status, 200);
      assert.deepEqual(first.json, [{ snapshotID: taken[1], names: ['second'] }], 'newest first');
      const token = first.headers.get('x-next-token');
      assert.ok(token);
      const second = await raw('GET', `/snapshots?sandboxID=${id}&limit=1&nextToken=${token}`);
      assert.deepEqual(second.json, [{ snapshotID: taken[0], names: [] }]);
      assert.equal(second.headers.get('x-next-token'), null);
      assert.equal((await raw('GET', '/snapshots?limit=0')).status, 400);
    } finally {
      for (const snap of taken) assert.equal((await raw('DELETE', `/templates/${snap}`)).status, 204);
      assert.equal((await raw('DELETE', `/sandboxes/${id}`)).status, 204);
    }
  });

  test('the older GET /sandboxes lists running sandboxes with a metadata filter', async () => {
    const a = await raw('POST', '/sandboxes', { body: { templateID: 'base', metadata: { old: 'yes' } } });
    assert.equal(a.status, 201);
    try {
      const r = await raw('GET', `/sandboxes?metadata=${encodeURIComponent('old=yes')}`);
      assert.equal(r.status, 200);
      assert.deepEqual(
        r.json.map((s: { sandboxID: string }) => s.sandboxID),
        [a.json.sandboxID],
      );
    } finally {
      await raw('DELETE', `/sandboxes/${a.json.sandboxID}`);
    }
  });

  test('an admin key sees every owner’s e2b sandboxes; boxes made through sbx’s own API are not e2b sandboxes', async () => {
    const admin = (await t.server.keys.create({ name: 'root', role: 'admin' })).e2bKey;
    const sbx = await e2b.Sandbox.create('base', { ...opts(alice), metadata: { who: 'alice' } });
    const plain = await t.manager.create({ image: testEnv.baseImage, owner: 'admin' });
    try {
      const seen = await e2b.Sandbox.list(opts(admin)).nextItems();
      assert.ok(seen.some((s) => s.sandboxId === sbx.sandboxId));
      assert.ok(!seen.some((s) => s.sandboxId === plain.id));
      await assert.rejects(e2b.Sandbox.getInfo(plain.id, opts(admin)), e2b.SandboxNotFoundError);
    } finally {
      await sbx.kill();
      await plain.remove();
    }
  });
});

test('the deprecated POST /sandboxes/:id/resume: 409 while running; once paused 201 with the sandbox and a new timeout (default 15 s)', async () => {
  const sbx = await e2b.Sandbox.create('base', { ...opts(alice), timeoutMs: 60_000 });
  try {
    const running = await raw('POST', `/sandboxes/${sbx.sandboxId}/resume`, { body: {} });
    assert.equal(running.status, 409);
    assert.deepEqual(running.json, { code: 409, message: `sandbox '${sbx.sandboxId}' is already running` });
    assert.equal((await raw('POST', `/sandboxes/${sbx.sandboxId}/pause`, { body: {} })).status, 204);
    assert.deepEqual((await raw('POST', `/sandboxes/${sbx.sandboxId}/pause`, { body: {} })).json, {
      code: 409,
      message: `sandbox '${sbx.sandboxId}' is already paused`,
    });
    const before = Date.now();
    const resumed = await raw('POST', `/sandboxes/${sbx.sandboxId}/resume`, { body: { autoPause: false } });
    assert.equal(resumed.status, 201);
    assert.equal(resumed.json.sandboxID, sbx.sandboxId);
    assert.equal(resumed.json.envdAccessToken, tokenOf(sbx));
    const info = await sbx.getInfo();
    assert.equal(info.state, 'running');
    assert.ok(info.endAt.getTime() >= before + 15_000 - 1_000 && info.endAt.getTime() <= Date.now() + 15_000 + 1_000);
    assert.equal((await raw('POST', `/sandboxes/${sbx.sandboxId}/resume`, { key: bob, body: {} })).status, 404);
  } finally {
    await sbx.kill();
  }
});

describe('a second process and the cleanup loop', () => {
  test('Sandbox.connect from another process configured by E2B_* variables only', async () => {
    const sbx = await e2b.Sandbox.create('base', opts(alice));
    try {
      const script = `import { Sandbox } from 'e2b'; const s = await Sandbox.connect(process.argv[1]); const i = await s.getInfo(); console.log(JSON.stringify({ id: s.sandboxId, token: s.envdAccessToken, state: i.state }));`;
      // Asynchronously: the server answering the child runs in this process.
      const r = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script, sbx.sandboxId], {
        encoding: 'utf8',
        timeout: 60_000,
        env: { PATH: process.env['PATH'] ?? '', E2B_API_URL: `${t.url}/e2b/api`, E2B_SANDBOX_URL: `${t.url}/e2b/envd`, E2B_API_KEY: alice },
      });
      assert.deepEqual(JSON.parse(r.stdout), { id: sbx.sandboxId, token: tokenOf(sbx), state: 'running' });
    } finally {
      await sbx.kill();
    }
  });

  test('setTimeout: the cleanup loop removes the sandbox at the new deadline, not the old; one being removed is not found', async () => {
    // The server's clock is a manual one, so the deadlines are the ones the test sets however long
    // a create takes on a loaded machine; the engine and the cleanup loop are real.
    const clock = new ManualClock(Date.now());
    const docker = new DockerRuntime(testEnv.engineAddr);
    const fast = await startTestServer('e2b-cleanup', {
      config: { clock: clock.now, cleanupIntervalMs: 100, pools: [{ name: 'local', runtime: docker }] },
      serve: { e2b: { templates: TEMPLATES } },
    });
    const containers = () => engine.list({ labels: managerSelector(fast.manager.config.name) });
    let held: ReturnType<typeof holdRemoves> | undefined;
    try {
      const key = (await fast.server.keys.create({ name: 'carol', role: 'user' })).e2bKey;
      const sbx = await e2b.Sandbox.create('base', { ...opts(key, fast.url), timeoutMs: 60_000 });
      const oldEnd = clock.now() + 60_000;
      assert.equal((await sbx.getInfo()).endAt.getTime(), oldEnd);
      clock.advance(30_000);
      await sbx.setTimeout(90_000);
      const newEnd = clock.now() + 90_000;
      assert.equal((await sbx.getInfo()).endAt.getTime(), newEnd);

      // At the old deadline: a whole pass runs (the second call starts after any pass in flight ended).
      clock.set(oldEnd);
      await fast.manager.cleanup();
      await fast.manager.cleanup();
      assert.equal((await containers()).length, 1, 'alive at the old deadline');
      assert.equal((await sbx.getInfo()).state, 'running');

      // At the new one the loop removes it. The engine's answer is held after the container is
      // gone: the sandbox must read as gone already, not as running (CI once saw that).
      held = holdRemoves(docker);
      clock.set(newEnd);
      await within(held.engineDropped, 'the cleanup loop to remove the sandbox past its new deadline');
      assert.deepEqual(await containers(), []);
      await assert.rejects(sbx.getInfo(), e2b.SandboxNotFoundError);
      assert.ok(!(await e2b.Sandbox.list(opts(key, fast.url)).nextItems()).some((s) => s.sandboxId === sbx.sandboxId));
      held.release();
      await fast.manager.cleanup(); // the pass that removes it, or a later one
      assert.equal(fast.manager.cleanupStats.removedLifetime, 1);
      await assert.rejects(sbx.getInfo(), e2b.SandboxNotFoundError);
    } finally {
      held?.release(); // a failed assert must not leave the removal, and so the server's close, waiting
      await fast.dispose();
      await docker.close();
    }
  });

  test('lifecycle onTimeout pause (autoPause): the cleanup loop pauses the sandbox at its timeout and keeps it; connect resumes it with a new one', async () => {
    const clock = new ManualClock(Date.now());
    const docker = new DockerRuntime(testEnv.engineAddr);
    const fast = await startTestServer('e2b-autopause', {
      config: { clock: clock.now, cleanupIntervalMs: 100, pools: [{ name: 'local', runtime: docker }] },
      serve: { e2b: { templates: TEMPLATES } },
    });
    try {
      const key = (await fast.server.keys.create({ name: 'dave', role: 'user' })).e2bKey;
      for (const { name, mod } of SDKS) {
        const sbx = await mod.Sandbox.create('base', { ...opts(key, fast.url), timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true } });
        try {
          const box = await fast.manager.get(sbx.sandboxId);
          assert.equal((await box.info()).maxLifetimeAction, 'pause', name);
          clock.set(Date.parse(box.createdAt) + 60_000);
          await waitFor(async () => (await sbx.getInfo()).state === 'paused', { what: `${name}: the cleanup loop to pause the sandbox at its timeout` });
          await untilEngineSays(engine, box.containerId, 'paused');
          const listed = await mod.Sandbox.list({ ...opts(key, fast.url), query: { state: ['paused'] } }).nextItems();
          assert.deepEqual(
            listed.map((s) => s.sandboxId),
            [sbx.sandboxId],
          );
          // Long past its timeout it is still there, paused: its lifetime ended with the pause.
          clock.advance(3_600_000);
          await fast.manager.cleanup();
          await fast.manager.cleanup();
          await untilEngineSays(engine, box.containerId, 'paused');
          await mod.Sandbox.connect(sbx.sandboxId, { ...opts(key, fast.url), timeoutMs: 30_000 });
          const info = await sbx.getInfo();
          assert.equal(info.state, 'running');
          assert.equal(info.endAt.getTime(), clock.now() + 30_000);
          await untilEngineSays(engine, box.containerId, 'running');
        } finally {
          await sbx.kill();
        }
      }
      assert.equal(fast.manager.cleanupStats.pausedLifetime, SDKS.length);
    } finally {
      await fast.dispose();
      await docker.close();
    }
  });
});
