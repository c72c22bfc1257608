import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import { isSbxError, SbxError } from '../errors.js';
import type { ContainerSpec, Runtime } from '../runtime/types.js';
import { ManualClock } from './clock.js';
import { RUNTIME_OPS } from './counting-runtime.js';
import { holdOpen, MemoryRuntime } from './memory-runtime.js';
import type { MemoryRuntimeOptions } from './memory-runtime.js';
import { testEnv } from './env.js';

const base = testEnv.baseImage;

function setup(opts: MemoryRuntimeOptions = {}) {
  const clock = new ManualClock();
  const rt = new MemoryRuntime({ clock: clock.now, ...opts });
  return { rt, clock };
}

async function started(rt: Runtime, extra: Partial<ContainerSpec> = {}): Promise<string> {
  const id = await rt.create({ image: base, ...extra });
  await rt.start(id);
  return id;
}

async function text(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

describe('MemoryRuntime: containers', () => {
  test('create, start, stop, start again, remove: status, exit code and timestamps from the clock', async () => {
    const { rt, clock } = setup();
    const id = await rt.create({ image: base, name: 'one' });
    assert.match(id, /^[0-9a-f]{64}$/);
    let info = await rt.inspect(id);
    assert.equal(info.status, 'created');
    assert.equal(info.running, false);
    assert.equal(info.exitCode, null, 'never started');
    assert.equal(info.startedAt, null);
    assert.equal(info.createdAt, clock.iso());
    assert.equal(info.name, 'one');

    clock.advance(1500);
    await rt.start(id);
    await rt.start(id); // starting a running container is fine
    info = await rt.inspect(id);
    assert.equal(info.status, 'running');
    assert.equal(info.exitCode, null);
    assert.equal(info.startedAt, clock.iso());

    await rt.stop(id, { timeoutMs: 5000 });
    await rt.stop(id); // stopping a stopped container is fine
    info = await rt.inspect(id);
    assert.equal(info.status, 'exited');
    assert.equal(info.exitCode, 0);

    await rt.start(id);
    assert.equal((await rt.inspect(id)).running, true);
    await rt.remove(id, { force: true });
    await assert.rejects(rt.inspect(id), (e) => isSbxError(e, 'not_found'));
  });

  test('stop of a created container is fine and leaves it created', async () => {
    const { rt } = setup();
    const id = await rt.create({ image: base });
    await rt.stop(id);
    assert.equal((await rt.inspect(id)).status, 'created');
  });

  test('a duplicate name is conflict; the name is free again after remove', async () => {
    const { rt } = setup();
    const a = await rt.create({ image: base, name: 'dup' });
    await assert.rejects(rt.create({ image: base, name: 'dup' }), (e) => isSbxError(e, 'conflict') && e.message.includes('dup'));
    await rt.remove(a);
    await rt.create({ image: base, name: 'dup' });
  });

  test('containers are found by id, unique id prefix and name', async () => {
    const { rt } = setup();
    const id = await rt.create({ image: base, name: 'named' });
    assert.equal((await rt.inspect('named')).id, id);
    assert.equal((await rt.inspect(id.slice(0, 12))).id, id);
  });

  test('labels are stored and list filters by them: every pair, "" means the label exists', async () => {
    const { rt } = setup();
    const a = await rt.create({ image: base, labels: { 'sbx.conf': 'a', 'sbx.pool': 'p' } });
    const b = await rt.create({ image: base, labels: { 'sbx.conf': 'b', 'sbx.pool': 'p' } });
    const c = await rt.create({ image: base, labels: { other: 'x' } });
    const ids = async (labels: Record<string, string>) => (await rt.list({ labels })).map((s) => s.id);
    assert.deepEqual(await ids({ 'sbx.conf': 'a' }), [a]);
    assert.deepEqual(await ids({ 'sbx.conf': 'a', 'sbx.pool': 'q' }), []);
    assert.deepEqual(await ids({ 'sbx.pool': '' }), [b, a], 'newest first');
    assert.deepEqual(await ids({}), [c, b, a]);
    const [found] = await rt.list({ labels: { 'sbx.conf': 'a' } });
    assert.equal(found?.labels['sbx.conf'], 'a');
    assert.equal(found?.status, 'created');
    assert.equal((await rt.inspect(b)).labels['sbx.conf'], 'b');
  });

  test('list: all defaults to true, all: false lists running containers only', async () => {
    const { rt } = setup();
    const stopped = await rt.create({ image: base });
    const up = await started(rt);
    assert.deepEqual(
      (await rt.list()).map((s) => s.id),
      [up, stopped],
    );
    assert.deepEqual(
      (await rt.list({ all: false })).map((s) => [s.id, s.running]),
      [[up, true]],
    );
  });

  test("list's createdAt has whole seconds, as the Engine API's; inspect's has milliseconds", async () => {
    const { rt, clock } = setup();
    clock.set(Date.UTC(2025, 5, 1, 12, 0, 0, 750));
    const id = await rt.create({ image: base });
    assert.equal((await rt.inspect(id)).createdAt, '2025-06-01T12:00:00.750Z');
    assert.equal((await rt.list())[0]?.createdAt, '2025-06-01T12:00:00.000Z');
  });

  test('what list and inspect return are copies', async () => {
    const { rt } = setup();
    const id = await rt.create({ image: base, labels: { a: '1' } });
    (await rt.inspect(id)).labels['a'] = 'changed';
    (await rt.list())[0]!.labels['a'] = 'changed';
    assert.equal((await rt.inspect(id)).labels['a'], '1');
  });

  test('force-remove takes a running container away; without force it is conflict', async () => {
    const { rt } = setup();
    const id = await started(rt);
    await assert.rejects(rt.remove(id), (e) => isSbxError(e, 'conflict'));
    await rt.remove(id, { force: true });
    await assert.rejects(rt.inspect(id), (e) => isSbxError(e, 'not_found'));
  });

  test('ports are published on 127.0.0.1 with a picked host port while running', async () => {
    const { rt } = setup();
    const id = await rt.create({ image: base, ports: [{ containerPort: 8080 }, { containerPort: 53, protocol: 'udp', hostPort: 5353 }] });
    assert.deepEqual((await rt.inspect(id)).ports, []);
    await rt.start(id);
    const ports = (await rt.inspect(id)).ports;
    const p = ports.find((x) => x.containerPort === 8080);
    assert.equal(p?.hostIp, '127.0.0.1');
    assert.ok(p && p.hostPort > 0);
    assert.deepEqual(
      ports.find((x) => x.containerPort === 53),
      { containerPort: 53, protocol: 'udp', hostIp: '127.0.0.1', hostPort: 5353 },
    );
  });

  test('processes and stats describe a running container', async () => {
    const { rt } = setup();
    const box = await started(rt);
    const ps = await rt.processes(box);
    assert.ok(ps.some((p) => p.command.includes('sleep 86400')));
    const st = await rt.stats(box);
    assert.ok(st.memoryBytes > 0);
    assert.ok(st.pids >= 1);
    const custom = await started(rt, { cmd: ['sleep', '5'], user: '1000', memory: 64 * 1024 * 1024 });
    assert.deepEqual(await rt.processes(custom), [{ pid: '1', user: '1000', command: 'sleep 5' }]);
    assert.equal((await rt.stats(custom)).memoryLimitBytes, 64 * 1024 * 1024);
    await rt.stop(custom);
    await assert.rejects(rt.processes(custom), (e) => isSbxError(e, 'conflict'));
    assert.equal((await rt.stats(custom)).pids, 0);
  });

  test('unknown ids are not_found for every call', async () => {
    const { rt } = setup();
    const ghost = 'no-such-container';
    for (const call of [
      () => rt.inspect(ghost),
      () => rt.remove(ghost, { force: true }),
      () => rt.start(ghost),
      () => rt.stop(ghost),
      () => rt.exec(ghost, ['true']),
      () => rt.execStream(ghost, ['true']),
      () => rt.processes(ghost),
      () => rt.stats(ghost),
    ]) {
      await assert.rejects(call(), (e) => isSbxError(e, 'not_found'));
    }
  });

  test('bad specs are invalid_argument naming the field, as on the real engine', async () => {
    const { rt } = setup();
    const box = await started(rt);
    const cases: Array<[Partial<ContainerSpec>, string]> = [
      [{ image: '' }, 'image'],
      [{ memory: 10 }, 'memory'],
      [{ ports: [{ containerPort: 70000 }] }, 'ports.0.containerPort'],
      [{ binds: [{ hostPath: 'relative', containerPath: '/x' }] }, 'binds.0.hostPath'],
      [{ env: { 'BAD-NAME': 'x' } }, 'env.BAD-NAME'],
      [{ workDir: 'tmp' }, 'workDir'],
    ];
    for (const [extra, field] of cases) {
      await assert.rejects(rt.create({ image: base, ...extra }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === field);
    }
    await assert.rejects(rt.exec(box, []), (e) => isSbxError(e, 'invalid_argument'));
    await assert.rejects(rt.execStream(box, []), (e) => isSbxError(e, 'invalid_argument'));
    // Exec options go through the same validators as the Docker runtime's.
    await assert.rejects(rt.exec(box, ['true'], { workDir: 'relative' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'workDir');
    await assert.rejects(rt.execStream(box, ['true'], { size: { cols: 0, rows: 1 } }), (e) => isSbxError(e, 'invalid_argument'));
  });

  test('a missing image is not_found naming it', async () => {
    const { rt } = setup();
    await assert.rejects(rt.create({ image: 'sbx-absent:none' }), (e) => isSbxError(e, 'not_found') && e.message.includes('sbx-absent:none'));
    assert.equal(await rt.images.exists('sbx-absent:none'), false);
    assert.equal(await rt.images.exists(base), true);
  });

  test('version, capabilities and resources', async () => {
    const { rt } = setup();
    const v = await rt.version();
    assert.ok(v.version.length > 0 && v.apiVersion.length > 0);
    assert.deepEqual(rt.capabilities, { hostMounts: false });
    assert.deepEqual(new MemoryRuntime({ capabilities: { hostMounts: true } }).capabilities, { hostMounts: true });
    assert.deepEqual(await rt.resources(), { cpus: 2, memoryBytes: 8 * 1024 * 1024 * 1024 });
    const small = new MemoryRuntime({ resources: { cpus: 1 } });
    assert.equal((await small.resources()).cpus, 1);
  });
});

describe('MemoryRuntime: exec', () => {
  test('default: exit 0, empty output; durationMs from the clock', async () => {
    const { rt } = setup();
    const box = await started(rt);
    assert.deepEqual(await rt.exec(box, ['true']), { exitCode: 0, stdout: '', stderr: '', truncated: false, timedOut: false, durationMs: 0 });
  });

  test('the handler sees cmd, env, user, workDir and stdin, and plays the output and exit code', async () => {
    const { rt } = setup();
    const box = await started(rt, { env: { GREETING: 'hello', OTHER: 'x' }, workDir: '/tmp', user: '1000' });
    rt.onExec = async (p) => ({
      exitCode: 42,
      stdout: `${p.cmd.join(' ')}|${p.env['GREETING']} ${p.env['OTHER']}|${p.user}|${p.workDir}|${await p.readStdin()}`,
      stderr: 'err\n',
    });
    const r = await rt.exec(box, ['cat'], { stdin: 'in' });
    assert.equal(r.stdout, 'cat|hello x|1000|/tmp|in');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.exitCode, 42);
    const o = await rt.exec(box, ['cat'], { env: { GREETING: 'bye' }, workDir: '/', user: '0' });
    assert.equal(o.stdout, 'cat|bye x|0|/|');
  });

  test('exec and processes on a container that is not running are conflict', async () => {
    const { rt } = setup();
    const id = await rt.create({ image: base });
    await assert.rejects(rt.exec(id, ['true']), (e) => isSbxError(e, 'conflict'));
    await assert.rejects(rt.execStream(id, ['true']), (e) => isSbxError(e, 'conflict'));
  });

  test('maxOutputBytes truncates and says so', async () => {
    const { rt } = setup({ onExec: (p) => ({ stdout: 'a'.repeat(100_000), stderr: p.cmd[0] === 'big' ? 'done\n' : '' }) });
    const box = await started(rt);
    const r = await rt.exec(box, ['big'], { maxOutputBytes: 1000 });
    assert.equal(r.stdout.length, 1000);
    assert.equal(r.truncated, true);
    assert.equal(r.stderr, 'done\n');
    assert.equal((await rt.exec(box, ['big'])).truncated, false);
  });

  test('a timeout kills the process, gives 137 and timedOut, and aborts its signal', async () => {
    let signal: AbortSignal | undefined;
    const { rt } = setup({
      onExec: (p) => {
        signal = p.signal;
        return holdOpen(p);
      },
    });
    const box = await started(rt);
    const r = await rt.exec(box, ['sleep', '301'], { timeoutMs: 30 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    assert.equal(signal?.aborted, true);
    assert.equal(rt.inFlightExecs(box), 0);
  });

  test('an abort signal cancels a buffered exec', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const box = await started(rt);
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('caller gave up')), 20);
    await assert.rejects(rt.exec(box, ['sleep', '321'], { signal: ac.signal }), (e) => isSbxError(e, 'cancelled') && e.message.includes('caller gave up'));
    await assert.rejects(rt.exec(box, ['x'], { signal: AbortSignal.abort() }), (e) => isSbxError(e, 'cancelled'));
    assert.equal(rt.inFlightExecs(), 0);
  });

  test('a handler that throws fails the exec with its error', async () => {
    const { rt } = setup({
      onExec: () => {
        throw new SbxError('runtime_unavailable', 'engine went away mid-exec');
      },
    });
    const box = await started(rt);
    await assert.rejects(rt.exec(box, ['x']), (e) => isSbxError(e, 'runtime_unavailable'));
    const s = await rt.execStream(box, ['x']);
    await assert.rejects(s.wait(), (e) => isSbxError(e, 'runtime_unavailable'));
  });

  test('in-flight execs are counted, listed, and shown by processes and stats until they exit', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const a = await started(rt);
    const b = await started(rt);
    const runs = [rt.exec(a, ['one']), rt.exec(a, ['two']), rt.exec(b, ['three'])];
    await sleep(0);
    assert.equal(rt.inFlightExecs(), 3);
    assert.equal(rt.inFlightExecs(a), 2);
    assert.deepEqual(
      rt.execs(a).map((p) => p.cmd[0]),
      ['one', 'two'],
    );
    assert.ok((await rt.processes(a)).some((p) => p.command === 'two'));
    assert.equal((await rt.stats(a)).pids, 3);
    rt.execs(a)[0]!.exit(7);
    assert.equal((await runs[0])?.exitCode, 7);
    assert.equal(rt.inFlightExecs(a), 1);
    for (const p of rt.execs()) p.exit();
    await Promise.all(runs);
    assert.equal(rt.inFlightExecs(), 0);
  });

  test('50 concurrent execs all return their own output', async () => {
    const { rt } = setup({ onExec: async (p) => ({ stdout: `out-${p.cmd[0]}\n`, stderr: `err-${p.cmd[0]}\n`, exitCode: Number(p.cmd[0]) % 7 }) });
    const box = await started(rt);
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => rt.exec(box, [String(i)])));
    results.forEach((r, i) => {
      assert.equal(r.stdout, `out-${i}\n`);
      assert.equal(r.stderr, `err-${i}\n`);
      assert.equal(r.exitCode, i % 7);
    });
  });

  test('stopping or removing a container kills its execs with 137', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const box = await started(rt);
    const run = rt.exec(box, ['sleep']);
    const s = await rt.execStream(box, ['sleep']);
    await sleep(0);
    await rt.stop(box);
    assert.equal((await run).exitCode, 137);
    assert.equal(await s.wait(), 137);
    assert.equal(rt.inFlightExecs(), 0);
  });
});

describe('MemoryRuntime: execStream', () => {
  test('stdin reaches the process, EOF is a half-close, output after EOF still arrives', async () => {
    const { rt } = setup({
      onExec: async (p) => {
        p.stdout.write(await p.readStdin());
        p.stdout.write('after-eof\n');
        return 0;
      },
    });
    const box = await started(rt);
    const s = await rt.execStream(box, ['cat']);
    const out = text(s.stdout);
    s.stdin.write('before\n');
    s.stdin.end();
    assert.equal(await s.wait(), 0);
    assert.equal(await out, 'before\nafter-eof\n');
    assert.equal(await text(s.stderr), '');
  });

  test('the exit is the test’s to control', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const box = await started(rt);
    const s = await rt.execStream(box, ['sh']);
    let done = false;
    void s.wait().then(() => (done = true));
    await sleep(5);
    assert.equal(done, false);
    const [p] = rt.execs(box);
    p!.stdout.write('hi\n');
    p!.exit(3);
    assert.equal(await s.wait(), 3);
    assert.equal(await text(s.stdout), 'hi\n');
    p!.stdout.write('dropped after the exit, no error\n');
  });

  test('big output arrives intact through a reading consumer', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const { rt } = setup({
      onExec: async (p) => {
        for (let i = 0; i < 160; i++) if (!p.stdout.write(chunk)) await new Promise((r) => p.stdout.once('drain', r));
      },
    });
    const box = await started(rt);
    const s = await rt.execStream(box, ['cat']);
    s.stdin.end();
    const [out, code] = await Promise.all([text(s.stdout), s.wait()]);
    assert.equal(code, 0);
    assert.equal(out.length, 160 * chunk.length);
  });

  test('cancel kills the process: 137, signal aborted, nothing left running', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const box = await started(rt);
    const s = await rt.execStream(box, ['sleep', '311']);
    const [p] = rt.execs(box);
    await s.cancel();
    assert.equal(await s.wait(), 137);
    assert.equal(p!.signal.aborted, true);
    assert.equal(rt.inFlightExecs(box), 0);
  });

  test('a timeout kills a stream too', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const box = await started(rt);
    const s = await rt.execStream(box, ['sleep'], { timeoutMs: 20 });
    assert.equal(await s.wait(), 137);
  });

  test('a tty merges stderr into stdout and records the size', async () => {
    const { rt } = setup({
      onExec: (p) => ({ stdout: `${p.size?.rows} ${p.size?.cols}\n`, stderr: 'to-err\n' }),
    });
    const box = await started(rt);
    const s = await rt.execStream(box, ['stty'], { tty: true, size: { cols: 100, rows: 30 } });
    const out = text(s.stdout);
    const err = text(s.stderr);
    assert.equal(await s.wait(), 0);
    assert.equal(await out, '30 100\nto-err\n');
    assert.equal(await err, '');

    const held = new MemoryRuntime({ onExec: holdOpen });
    const id = await started(held);
    const t = await held.execStream(id, ['sh'], { tty: true, size: { cols: 80, rows: 24 } });
    await t.resize({ cols: 120, rows: 40 });
    assert.deepEqual(held.execs(id)[0]?.size, { cols: 120, rows: 40 });
    await t.cancel();
  });
});

describe('MemoryRuntime: images', () => {
  test('exists for the configured set; references without a tag mean :latest', async () => {
    const rt = new MemoryRuntime({ images: ['busybox', 'a/b:1'] });
    assert.equal(await rt.images.exists('busybox:latest'), true);
    assert.equal(await rt.images.exists('busybox'), true);
    assert.equal(await rt.images.exists('a/b:1'), true);
    assert.equal(await rt.images.exists('a/b'), false);
    assert.equal(await rt.images.exists(base), false, 'the configured set replaces the default');
    await rt.create({ image: 'busybox' });
  });

  test('pull yields typed progress events and makes the image exist; a second pull is up to date', async () => {
    const ref = '127.0.0.1:5000/sbx/pulltest:latest';
    const rt = new MemoryRuntime({ registry: [ref] });
    assert.equal(await rt.images.exists(ref), false);
    const events = [];
    for await (const ev of rt.images.pull(ref)) events.push(ev);
    assert.ok(events.length >= 2);
    assert.ok(events.every((e) => typeof e.status === 'string'));
    assert.ok(events.some((e) => e.id !== undefined));
    assert.ok(events.some((e) => /Downloaded newer image/.test(e.status)));
    assert.equal(await rt.images.exists(ref), true);
    assert.ok((await rt.images.list()).some((i) => i.tags.includes(ref)));
    const again = [];
    for await (const ev of rt.images.pull(ref)) again.push(ev.status);
    assert.match(again.join(), /Image is up to date/);
  });

  test('pull of an image the registry lacks is not_found; an empty ref is invalid_argument', async () => {
    const rt = new MemoryRuntime();
    await assert.rejects(drain(rt.images.pull('127.0.0.1:5000/sbx/absent:none')), (e) => isSbxError(e, 'not_found') && e.message.includes('absent'));
    await assert.rejects(drain(rt.images.pull('')), (e) => isSbxError(e, 'invalid_argument'));
  });

  test('remove: not_found when absent, conflict while a container uses it unless forced', async () => {
    const rt = new MemoryRuntime();
    await rt.create({ image: base });
    await assert.rejects(rt.images.remove('nope:1'), (e) => isSbxError(e, 'not_found'));
    await assert.rejects(rt.images.remove(base), (e) => isSbxError(e, 'conflict'));
    await rt.images.remove(base, { force: true });
    assert.equal(await rt.images.exists(base), false);
  });

  test('build reads the context and tags the image', async () => {
    const rt = new MemoryRuntime();
    const lines = [];
    for await (const l of rt.images.build(Readable.from([Buffer.from('tar bytes')]), 'built:1')) lines.push(l);
    assert.match(lines.join(''), /Successfully tagged built:1/);
    assert.equal(await rt.images.exists('built:1'), true);
  });
});

describe('MemoryRuntime: events', () => {
  /** Collects events in the background until `stop()`; returns what arrived and how it ended. */
  function watch(rt: Runtime, labels?: Record<string, string>) {
    const ac = new AbortController();
    const seen: string[] = [];
    const done = (async () => {
      for await (const ev of rt.events({ signal: ac.signal, ...(labels ? { labels } : {}) })) seen.push(`${ev.action} ${ev.labels['n'] ?? ev.id}`);
    })();
    return { seen, done, stop: () => ac.abort() };
  }

  test('created, started, stopped, removed, filtered by labels like list, stamped by the clock', async () => {
    const { rt, clock } = setup();
    const w = watch(rt, { 'sbx.pool': 'p' });
    await sleep(0);
    const a = await rt.create({ image: base, labels: { 'sbx.pool': 'p', n: 'a' } });
    await rt.create({ image: base, labels: { 'sbx.pool': 'q', n: 'other' } });
    await rt.start(a);
    await rt.start(a); // no-op, no event
    await rt.stop(a);
    await rt.start(a);
    await rt.remove(a, { force: true });
    await sleep(0);
    w.stop();
    await w.done;
    assert.deepEqual(w.seen, ['created a', 'started a', 'stopped a', 'started a', 'stopped a', 'removed a']);

    const ac = new AbortController();
    const it = rt.events({ signal: ac.signal })[Symbol.asyncIterator]();
    const next = it.next();
    await rt.create({ image: base });
    const first = await next;
    assert.equal(first.done, false);
    assert.equal(first.value.action, 'created');
    assert.equal(first.value.at, clock.iso());
    ac.abort();
    assert.equal((await it.next()).done, true, 'an aborted signal ends the iteration');
  });

  test('a signal aborted before the start ends at once, without an engine call', async () => {
    const { rt } = setup();
    rt.failNext('events');
    for await (const _ of rt.events({ signal: AbortSignal.abort() })) assert.fail('no events');
    await assert.rejects(drain(rt.events({ signal: AbortSignal.timeout(1000) })), (e) => isSbxError(e, 'runtime_unavailable'), 'failNext still queued');
  });

  test('injectContainer and vanish are seen, as another client’s create and remove would be', async () => {
    const { rt } = setup();
    const w = watch(rt);
    await sleep(0);
    const id = rt.injectContainer({ labels: { n: 'x' } });
    rt.vanish(id);
    await sleep(0);
    w.stop();
    await w.done;
    assert.deepEqual(w.seen, ['created x', 'started x', 'stopped x', 'removed x']);
  });

  test('the engine going away: streams hand on what they had, then throw runtime_unavailable', async () => {
    const { rt } = setup();
    const a = await started(rt, { labels: { n: 'a' } });
    const w = watch(rt);
    await sleep(0);
    rt.simulateEngineRestart();
    await assert.rejects(w.done, (e) => isSbxError(e, 'runtime_unavailable'));
    assert.deepEqual(w.seen, ['stopped a'], 'the stream hands on the stop, then ends');
    assert.equal((await rt.inspect(a)).running, false);

    const w2 = watch(rt);
    await sleep(0);
    rt.setReachable(false);
    await assert.rejects(w2.done, (e) => isSbxError(e, 'runtime_unavailable'));
    await assert.rejects(drain(rt.events({ signal: AbortSignal.timeout(1000) })), (e) => isSbxError(e, 'runtime_unavailable'));
  });
});

describe('MemoryRuntime: test hooks', () => {
  test('failNext makes the next call of one operation throw, once per call queued', async () => {
    const { rt } = setup();
    rt.failNext('create');
    rt.failNext('create', new SbxError('internal', 'boom'));
    await assert.rejects(rt.create({ image: base }), (e) => isSbxError(e, 'runtime_unavailable'));
    await assert.rejects(rt.create({ image: base }), (e) => isSbxError(e, 'internal'));
    const id = await rt.create({ image: base });
    rt.failNext('images.exists');
    await assert.rejects(rt.images.exists(base), (e) => isSbxError(e, 'runtime_unavailable'));
    assert.equal(await rt.images.exists(base), true);
    rt.failNext('start');
    await rt.inspect(id); // other operations are untouched
    await assert.rejects(rt.start(id));
  });

  test('failNext takes every operation of the interface', async () => {
    const box = async (rt: MemoryRuntime) => started(rt);
    for (const op of RUNTIME_OPS) {
      const { rt } = setup({ registry: ['x:1'] });
      const id = await box(rt);
      rt.failNext(op, new SbxError('internal', `injected ${op}`));
      await assert.rejects(callOp(rt, op, id), (e) => isSbxError(e, 'internal') && e.message === `injected ${op}`, op);
    }
  });

  test('setReachable(false): every call is runtime_unavailable naming the address, state is kept', async () => {
    const { rt } = setup({ address: 'memory://node-a' });
    const id = await started(rt);
    rt.setReachable(false);
    for (const op of RUNTIME_OPS.filter((o) => o !== 'close')) {
      await assert.rejects(callOp(rt, op, id), (e) => isSbxError(e, 'runtime_unavailable') && e.message.includes('memory://node-a'), op);
    }
    // Bad input is still refused first, as on the real engine.
    await assert.rejects(rt.create({ image: '' }), (e) => isSbxError(e, 'invalid_argument'));
    rt.setReachable(true);
    assert.equal((await rt.inspect(id)).running, true);
  });

  test('simulateEngineRestart: running containers die (255) with their execs, and none runs again by itself', async () => {
    const { rt, clock } = setup({ onExec: holdOpen });
    const up = await started(rt);
    const other = await started(rt);
    const created = await rt.create({ image: base });
    const stopped = await started(rt);
    await rt.stop(stopped);
    const runs = [rt.exec(up, ['sleep']), rt.exec(other, ['sleep'])];
    await sleep(0);
    const startedAt = (await rt.inspect(up)).startedAt;
    clock.advance(10_000);
    rt.simulateEngineRestart();
    for (const id of [up, other]) {
      const info = await rt.inspect(id);
      assert.equal(info.status, 'exited');
      assert.equal(info.exitCode, 255);
    }
    for (const r of await Promise.all(runs)) assert.equal(r.exitCode, 137, 'execs die with the engine');
    // Starting them again is the Manager's (reconcile's revive), as with dockerd and no restart policy.
    await rt.start(up);
    assert.equal((await rt.inspect(up)).running, true);
    assert.notEqual((await rt.inspect(up)).startedAt, startedAt, 'a new start');
    assert.equal((await rt.inspect(created)).status, 'created', 'never started, not started now');
    assert.equal((await rt.inspect(stopped)).status, 'exited', 'stopped on purpose stays stopped');
    assert.equal((await rt.inspect(stopped)).exitCode, 0);
  });

  test('injectContainer makes a container appear, listed and filtered like any other', async () => {
    const { rt, clock } = setup();
    const id = rt.injectContainer({ name: 'foreign', labels: { 'sbx.managed-by': 'sbx', 'sbx.id': 'sb-1' }, createdAt: '2024-01-01T00:00:00.000Z' });
    const [s] = await rt.list({ labels: { 'sbx.managed-by': 'sbx' } });
    assert.equal(s?.id, id);
    assert.equal(s?.running, true);
    assert.equal(s?.createdAt, '2024-01-01T00:00:00.000Z');
    assert.equal((await rt.inspect('foreign')).labels['sbx.id'], 'sb-1');
    rt.simulateEngineRestart();
    assert.equal((await rt.inspect(id)).running, false, 'an injected container dies with the engine like any other');
    const exited = rt.injectContainer({ status: 'exited' });
    assert.equal((await rt.inspect(exited)).exitCode, 0);
    assert.equal((await rt.inspect(rt.injectContainer())).createdAt, clock.iso());
    assert.throws(
      () => rt.injectContainer({ name: 'foreign' }),
      (e) => isSbxError(e, 'conflict'),
    );
    await rt.remove(id, { force: true });
  });

  test('vanish removes a container behind the caller’s back', async () => {
    const { rt } = setup({ onExec: holdOpen });
    const id = await started(rt);
    const run = rt.exec(id, ['sleep']);
    await sleep(0);
    rt.vanish(id);
    assert.equal((await run).exitCode, 137);
    assert.equal(rt.inFlightExecs(id), 0);
    await assert.rejects(rt.inspect(id), (e) => isSbxError(e, 'not_found'));
    await assert.rejects(rt.remove(id, { force: true }), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual(await rt.list(), []);
  });

  test('ids are deterministic per address; default names never collide with given ones', async () => {
    const a = new MemoryRuntime({ address: 'a' });
    const a2 = new MemoryRuntime({ address: 'a' });
    const b = new MemoryRuntime({ address: 'b' });
    const spec = { image: base };
    assert.equal(await a.create(spec), await a2.create(spec));
    assert.notEqual(await a.create(spec), await b.create(spec));
    await a.create({ image: base, name: 'memory-4' });
    const auto = await a.create(spec);
    assert.notEqual((await a.inspect(auto)).name, 'memory-4');
  });

  test('close is recorded; latencyMs delays calls so concurrent callers interleave', async () => {
    const rt = new MemoryRuntime({ latencyMs: 20 });
    const t0 = performance.now();
    let answered = 0;
    const both = Promise.all([rt.ping(), rt.ping()].map((p) => p.then(() => answered++)));
    // A turn of the event loop later neither has answered: a real delay, not a microtask.
    await new Promise((r) => setImmediate(r));
    assert.equal(answered, 0);
    await both;
    const took = performance.now() - t0;
    assert.ok(took >= 15, `${took} ms: the delay was not waited`);
    assert.equal(rt.closed, false);
    await rt.close();
    assert.equal(rt.closed, true);
  });
});

/** Calls one operation of the interface with arguments that would otherwise succeed. */
function callOp(rt: Runtime, op: (typeof RUNTIME_OPS)[number], id: string): Promise<unknown> {
  switch (op) {
    case 'ping':
      return rt.ping();
    case 'version':
      return rt.version();
    case 'create':
      return rt.create({ image: base });
    case 'start':
      return rt.start(id);
    case 'stop':
      return rt.stop(id);
    case 'pause':
      return rt.pause(id);
    case 'unpause':
      return rt.unpause(id);
    case 'commit':
      return rt.commit(id, 'sbx-memory-commit:1');
    case 'remove':
      return rt.remove(id, { force: true });
    case 'inspect':
      return rt.inspect(id);
    case 'list':
      return rt.list();
    case 'processes':
      return rt.processes(id);
    case 'events': {
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 5);
      return drain(rt.events({ signal: ac.signal }));
    }
    case 'resources':
      return rt.resources();
    case 'stats':
      return rt.stats(id);
    case 'exec':
      return rt.exec(id, ['true']);
    case 'execStream':
      return rt.execStream(id, ['true']);
    case 'logs':
      return rt.logs(id);
    case 'setBoxEnv':
      return rt.setBoxEnv(id, { A: '1' });
    case 'dialPort':
      return rt.dialPort(id, 3000).catch((e: unknown) => {
        if (isSbxError(e, 'not_available')) return undefined;
        throw e;
      });
    case 'close':
      return rt.close();
    case 'images.exists':
      return rt.images.exists(base);
    case 'images.pull':
      return drain(rt.images.pull('x:1'));
    case 'images.list':
      return rt.images.list();
    case 'images.remove':
      return rt.images.remove('x:1', { force: true });
    case 'images.build':
      return drain(rt.images.build(Readable.from([]), 'y:1'));
  }
}

async function drain(it: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of it) {
    /* consume */
  }
}

describe('ManualClock', () => {
  test('starts at a fixed time, moves only by advance and set, and now works unbound', () => {
    const clock = new ManualClock();
    const now = clock.now;
    assert.equal(now(), Date.UTC(2025, 0, 1));
    assert.equal(clock.advance(1500), Date.UTC(2025, 0, 1, 0, 0, 1, 500));
    assert.equal(now(), clock.now());
    assert.equal(clock.iso(), '2025-01-01T00:00:01.500Z');
    clock.set(0);
    assert.equal(now(), 0);
    assert.throws(() => clock.advance(-1), RangeError);
    assert.throws(() => clock.set(Number.NaN), RangeError);
    assert.equal(new ManualClock(42).now(), 42);
  });
});
