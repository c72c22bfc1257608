/**
 * The Runtime conformance suite: written once, run against every Runtime implementation (Docker:
 * src/runtime/docker/docker-runtime.test.ts; Kubernetes: src/runtime/kubernetes/kubernetes-conformance.test.ts,
 * skipping the cases its capabilities rule out), like a router conformance suite. Each case pins
 * one behaviour callers rely on.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import type { ContainerSpec, ExecStream, LogChunk, RegistryAuth, Runtime, RuntimeCapabilities } from '../runtime/types.js';
import { capabilitiesOf } from '../runtime/types.js';
import { assertNoContainersLeft } from './cleanup.js';
import { TEST_LABEL } from './env.js';
import { untilEngineSays } from './freezer.js';
import { waitFor, within } from './wait.js';

export interface RuntimeConformanceFixture {
  /** Opens a runtime on a reachable engine. */
  open(): Runtime;
  /** Opens a runtime whose engine is not there (a dead socket, a closed port). */
  openUnreachable(): Runtime;
  /** busybox image whose CMD is the graceful-shutdown sleep and which has user uid 1000. */
  baseImage: string;
  /** An image in a registry this engine can pull from, and credentials for an authenticated one. */
  pull?: { ref: string; authRef?: string; auth?: RegistryAuth };
  runId: string;
  /**
   * The command of boxes whose case gives none, for a runtime that cannot read the image's
   * (Kubernetes with the in-box agent: the agent runs the command, and no image config is read).
   */
  cmd?: string[];
  /** Fields every box of the suite gets, e.g. `{ ociRuntime: 'runsc' }` for a gVisor pool. */
  spec?: Partial<ContainerSpec>;
}

const MiB = 1024 * 1024;

function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

async function collect(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

/** Lists the commands running in a container whose command line contains `needle`. */
async function running(rt: Runtime, id: string, needle: string): Promise<string[]> {
  return (await rt.processes(id)).map((p) => p.command).filter((c) => c.includes(needle));
}

export function runtimeConformance(name: string, fx: RuntimeConformanceFixture): void {
  describe(`Runtime conformance: ${name}`, () => {
    let rt: Runtime;
    let box: string;
    /** What the suite's boxes get (their OCI runtime's, e.g. gVisor's). */
    let caps: RuntimeCapabilities;

    const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
      image: fx.baseImage,
      ...(fx.cmd ? { cmd: fx.cmd } : {}),
      ...fx.spec,
      ...extra,
      labels: { [TEST_LABEL]: fx.runId, ...(extra.labels ?? {}) },
    });

    async function started(extra: Partial<ContainerSpec> = {}): Promise<string> {
      const id = await rt.create(spec(extra));
      await rt.start(id);
      return id;
    }

    before(async () => {
      rt = fx.open();
      await rt.ping();
      box = await started();
      caps = capabilitiesOf(rt, fx.spec?.ociRuntime);
    });

    after(async () => {
      try {
        // The shared box is the only container the cases leave on purpose; anything else is a leak.
        if (box) await rt.remove(box, { force: true });
        await assertNoContainersLeft(rt, fx.runId);
      } finally {
        await rt.close();
      }
    });

    test('version names the engine', async () => {
      const v = await rt.version();
      assert.ok(v.version.length > 0);
      assert.ok(v.apiVersion.length > 0);
    });

    test('labels are stored and list filters by them', async () => {
      const a = await rt.create(spec({ labels: { 'sbx.conf': 'a' } }));
      const b = await rt.create(spec({ labels: { 'sbx.conf': 'b' } }));
      const found = await rt.list({ labels: { [TEST_LABEL]: fx.runId, 'sbx.conf': 'a' } });
      assert.deepEqual(
        found.map((c) => c.id),
        [a],
      );
      assert.equal(found[0]?.labels['sbx.conf'], 'a');
      const info = await rt.inspect(b);
      assert.equal(info.labels['sbx.conf'], 'b');
      assert.equal(info.status, 'created');
      await Promise.all([rt.remove(a), rt.remove(b)]);
    });

    test('the container user applies to execs, and an exec may override it', async (t) => {
      const id = await started({ user: '1000' });
      assert.equal((await rt.exec(id, ['id', '-u'])).stdout.trim(), '1000');
      if (caps.execUser === false) {
        await assert.rejects(rt.exec(id, ['id', '-u'], { user: '0' }), (e) => isSbxError(e, 'not_available'));
        t.diagnostic('capabilities.execUser is false: another user is not_available');
      } else assert.equal((await rt.exec(id, ['id', '-u'], { user: '0' })).stdout.trim(), '0');
      await rt.remove(id, { force: true });
    });

    test('env and workDir reach the process; exec env and workDir override them', async () => {
      const id = await started({ env: { GREETING: 'hello', OTHER: 'x' }, workDir: '/tmp' });
      const r = await rt.exec(id, ['sh', '-c', 'echo "$GREETING $OTHER $(pwd)"']);
      assert.equal(r.stdout, 'hello x /tmp\n');
      const o = await rt.exec(id, ['sh', '-c', 'echo "$GREETING $(pwd)"'], { env: { GREETING: 'bye' }, workDir: '/' });
      assert.equal(o.stdout, 'bye /\n');
      await rt.remove(id, { force: true });
    });

    test('exit code 42 is reported', async () => {
      const r = await rt.exec(box, ['sh', '-c', 'exit 42']);
      assert.equal(r.exitCode, 42);
      assert.equal(r.timedOut, false);
    });

    test('stdout and stderr stay separate', async () => {
      const r = await rt.exec(box, ['sh', '-c', 'echo out1; echo err1 >&2; echo out2; echo err2 >&2']);
      assert.equal(r.stdout, 'out1\nout2\n');
      assert.equal(r.stderr, 'err1\nerr2\n');
    });

    test('a command that cannot start is a typed error, not a hang or a program output', async () => {
      await assert.rejects(rt.exec(box, ['/no/such/binary']), (e: unknown) => isSbxError(e, 'not_found'));
      await assert.rejects(rt.exec(box, ['/etc/hostname']), (e: unknown) => isSbxError(e));
      await assert.rejects(rt.exec(box, ['true'], { workDir: '/no/such/dir' }), (e: unknown) => isSbxError(e, 'invalid_argument'));
    });

    test('stdin reaches cat and wc -c, and EOF is a real half-close', async () => {
      const r = await rt.exec(box, ['cat'], { stdin: 'line one\nline two\n' });
      assert.equal(r.stdout, 'line one\nline two\n');
      const payload = Buffer.alloc(3 * MiB + 7, 'z');
      const w = await rt.exec(box, ['wc', '-c'], { stdin: payload });
      assert.equal(w.stdout.trim(), String(payload.length));

      // Output produced after stdin closed must still arrive.
      const s = await rt.execStream(box, ['sh', '-c', 'cat; sleep 0.2; echo after-eof']);
      const out = collect(s.stdout);
      s.stdin.write('before\n');
      s.stdin.end();
      assert.equal(await s.wait(), 0);
      assert.equal((await out).toString(), 'before\nafter-eof\n');
    });

    test('10 MB of output arrives intact', async () => {
      await rt.exec(box, ['sh', '-c', 'head -c 10485760 /dev/urandom > /tmp/ten']);
      const sum = (await rt.exec(box, ['sha256sum', '/tmp/ten'])).stdout.split(' ')[0];
      const s = await rt.execStream(box, ['cat', '/tmp/ten']);
      s.stdin.end();
      const [bytes, code] = await Promise.all([collect(s.stdout), s.wait()]);
      assert.equal(code, 0);
      assert.equal(bytes.length, 10 * MiB);
      assert.equal(sha256(bytes), sum);
      // The buffered exec keeps text intact too.
      const b64 = await rt.exec(box, ['base64', '/tmp/ten']);
      assert.equal(sha256(Buffer.from(b64.stdout.replace(/\n/g, ''), 'base64')), sum);
    });

    test('maxOutputBytes truncates and says so', async () => {
      const r = await rt.exec(box, ['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" a; echo done >&2'], { maxOutputBytes: 1000 });
      assert.equal(r.stdout.length, 1000);
      assert.equal(r.truncated, true);
      assert.equal(r.stderr, 'done\n');
      assert.equal(r.exitCode, 0);
      const small = await rt.exec(box, ['echo', 'hi'], { maxOutputBytes: 1000 });
      assert.equal(small.truncated, false);
    });

    test('a timeout kills the process and what it started, and says so', async () => {
      const r = await rt.exec(box, ['sh', '-c', 'sleep 301 & sleep 302; echo never'], { timeoutMs: 300 });
      assert.equal(r.timedOut, true);
      assert.equal(r.exitCode, 137);
      assert.equal(r.stdout, '');
      assert.deepEqual(await running(rt, box, 'sleep 30'), []);
    });

    test('stream cancel kills the process inside the box', async () => {
      const s = await rt.execStream(box, ['sh', '-c', 'sleep 311 & sleep 312']);
      await waitFor(async () => (await running(rt, box, 'sleep 31')).length === 2, { what: 'both sleeps to run' });
      await s.cancel();
      assert.equal(await s.wait(), 137);
      assert.deepEqual(await running(rt, box, 'sleep 31'), []);
    });

    test('an abort signal cancels a buffered exec and kills the process', async () => {
      const ac = new AbortController();
      const call = rt.exec(box, ['sleep', '321'], { signal: ac.signal });
      await waitFor(async () => (await running(rt, box, 'sleep 321')).length === 1, { what: 'the sleep to run' });
      ac.abort(new Error('caller gave up'));
      await assert.rejects(call, (e) => isSbxError(e, 'cancelled'));
      assert.deepEqual(await running(rt, box, 'sleep 321'), []);
    });

    test('wait() resolves after the process exits, with its code (the lag is reported)', async (t) => {
      // The lag from the process's last output to wait() resolving, so start-up costs do not
      // count. The seed polled every 500 ms (a median lag near 250 ms); we learn of the exit
      // from the stream closing. Reported, not asserted (a loaded machine broke the bound): the
      // bench's Exec rows time the same round trip.
      const lags: number[] = [];
      for (let i = 0; i < 3; i++) {
        const s: ExecStream = await rt.execStream(box, ['sh', '-c', 'sleep 0.1; echo bye; exit 3']);
        s.stdin.end();
        let lastOutput = 0;
        s.stdout.on('data', () => (lastOutput = performance.now()));
        assert.equal(await s.wait(), 3);
        assert.ok(lastOutput > 0, 'output arrived before wait() resolved');
        lags.push(performance.now() - lastOutput);
      }
      t.diagnostic(`wait() lagged ${lags.map((l) => l.toFixed(0)).join(', ')} ms behind the last output`);
    });

    test('a process that closes its output early is still waited for, and still timed out', async () => {
      const s = await rt.execStream(box, ['sh', '-c', 'exec >&- 2>&-; sleep 0.5; exit 5']);
      s.stdin.end();
      const t0 = performance.now();
      assert.equal(await s.wait(), 5);
      assert.ok(performance.now() - t0 >= 400, 'wait() waited for the exit, not for the output to close');
      const r = await rt.exec(box, ['sh', '-c', 'exec >&- 2>&-; sleep 331'], { timeoutMs: 500 });
      assert.equal(r.timedOut, true);
      assert.equal(r.exitCode, 137);
      assert.deepEqual(await running(rt, box, 'sleep 331'), []);
    });

    test('50 concurrent execs on one box all return their own output', async () => {
      const results = await Promise.all(Array.from({ length: 50 }, (_, i) => rt.exec(box, ['sh', '-c', `echo out-${i}; echo err-${i} >&2; exit ${i % 7}`])));
      results.forEach((r, i) => {
        assert.equal(r.stdout, `out-${i}\n`);
        assert.equal(r.stderr, `err-${i}\n`);
        assert.equal(r.exitCode, i % 7);
      });
    });

    test('a tty stream merges output and can be resized', async () => {
      // Each line typed prints the size again, until q: the resize is asked for until it shows,
      // however long the command took to start.
      const script = 'stty size; while read x && [ "$x" != q ]; do stty size; done; echo to-err >&2';
      const s = await rt.execStream(box, ['sh', '-c', script], { tty: true, size: { cols: 100, rows: 30 } });
      let text = '';
      s.stdout.on('data', (c: Buffer) => (text += c.toString()));
      // The first line is not checked: the engine's exec applies the asked size just after
      // start, so its first stty may fail ("stty: standard input").
      await waitFor(() => text.includes('\n'), { what: 'the first stty' });
      await s.resize({ cols: 120, rows: 40 });
      await waitFor(
        () => {
          if (text.includes('40 120')) return true;
          s.stdin.write('go\n');
          return false;
        },
        { what: 'the new size', intervalMs: 100 },
      );
      s.stdin.write('q\n');
      assert.equal(await s.wait(), 0);
      await waitFor(() => text.includes('to-err'), { what: 'stderr merged into the output' });
    });

    test('a memory limit is enforced and the OOM kill reported', async () => {
      // tail keeps a line without newline in memory: the box's command outgrows the limit (32 MiB:
      // the least a gVisor box may have, its own kernel counts in it).
      const oom = async () => {
        const id = await started({ memory: 32 * MiB, cmd: ['tail', '/dev/zero'] });
        // An OOM kill can take many seconds on a loaded machine (gVisor on Kubernetes: the pod's
        // overhead fills first): wait for the exit, bounded only by a hang.
        let info = await waitFor(
          async () => {
            const i = await rt.inspect(id);
            return !i.running && i;
          },
          { what: 'the box to be OOM-killed' },
        );
        // The engine may handle the OOM event after the exit: give the flag a moment to arrive.
        for (let i = 0; i < 20 && !info.running && !info.oomKilled; i++) {
          await sleep(100);
          info = await rt.inspect(id);
        }
        await rt.remove(id, { force: true });
        return info;
      };
      let info = await oom();
      assert.equal(info.running, false);
      assert.equal(info.exitCode, 137);
      // Engine 20.10 sets OOMKilled from containerd's OOM event, which can lose the race with
      // the exit under load (seen once in three loaded suite runs): one more try, not a pass.
      if (!info.oomKilled) info = await oom();
      assert.equal(info.oomKilled, true);
    });

    test('a pids limit is enforced', async (t) => {
      if (caps.pidsLimit === false) return t.skip('capabilities.pidsLimit is false');
      // The limit counts every task of the box: the in-box agent's threads (5-7 seen) and its command
      // too, so it leaves the exec's shell room to start and then refuses its forks.
      const id = await started({ pidsLimit: 20 });
      const r = await rt.exec(id, ['sh', '-c', 'for i in $(seq 1 40); do sleep 30 & done; wait'], { timeoutMs: 5000 });
      assert.match(r.stderr, /fork|resource/i);
      const sleeps = await running(rt, id, 'sleep 30');
      assert.ok(sleeps.length < 20, `${sleeps.length} processes under a limit of 20`);
      await rt.remove(id, { force: true });
    });

    test('ports are published on 127.0.0.1 with a random host port', async (t) => {
      if (caps.publishedPorts === false) return t.skip('capabilities.publishedPorts is false');
      const id = await started({ ports: [{ containerPort: 8080 }] });
      const info = await rt.inspect(id);
      const p = info.ports.find((x) => x.containerPort === 8080);
      assert.ok(p, 'port 8080 published');
      assert.equal(p.hostIp, '127.0.0.1');
      assert.ok(p.hostPort > 0);
      await rt.remove(id, { force: true });
    });

    test('the graceful CMD stops on SIGTERM at once, with exit code 0', async (t) => {
      if (caps.stopStart === false) return t.skip('capabilities.stopStart is false: stop removes the box');
      const id = await started();
      try {
        // A started box's shell may not have read its `trap` yet, and a SIGTERM before that ends it
        // with 143 (gVisor on a loaded machine: 5 stops in 20 right after the start). The CMD's
        // sleep runs only after its trap is set.
        await waitFor(async () => (await running(rt, id, 'sleep 86400')).length > 0, { what: "the CMD's sleep, after its trap" });
        await rt.stop(id, { timeoutMs: 5000 });
        const info = await rt.inspect(id);
        assert.equal(info.running, false);
        // 0, not 137: the trap ran on SIGTERM, before the SIGKILL at the end of the stop timeout.
        assert.equal(info.exitCode, 0, 'exit 0 means the trap ran, not SIGKILL');
        await rt.stop(id); // stopping a stopped container is fine
        await rt.start(id);
        assert.equal((await rt.inspect(id)).running, true);
      } finally {
        await rt.remove(id, { force: true });
      }
    });

    test('pause freezes a running container and unpause thaws it, each idempotent; a stopped one cannot be paused', async (t) => {
      if (caps.pause === false) {
        await assert.rejects(rt.pause(box), (e) => isSbxError(e, 'not_available'));
        return t.skip('capabilities.pause is false: pause is not_available');
      }
      const id = await started();
      try {
        // inspect says what the engine says, and Docker's paused flag can lag a pause or an
        // unpause for a moment (a late containerd event of an earlier one, docker/freezer.ts): the
        // status is waited for; the exec after the unpause is what shows the box was thawed.
        await rt.pause(id);
        await rt.pause(id);
        await untilEngineSays(rt, id, 'paused');
        await rt.unpause(id);
        await rt.unpause(id);
        await untilEngineSays(rt, id, 'running');
        assert.equal((await within(rt.exec(id, ['echo', 'thawed']), 'an exec after the unpause')).stdout, 'thawed\n');
        await rt.stop(id, { timeoutMs: 1000 });
        await assert.rejects(rt.pause(id), (e) => isSbxError(e, 'conflict'));
        await rt.unpause(id); // a stopped container is not paused: nothing to do
      } finally {
        await rt.remove(id, { force: true });
      }
    });

    test('commit saves the filesystem as an image that starts as the original image would, without the box env of sbx', async (t) => {
      if (caps.commit === false) {
        await assert.rejects(rt.commit(box, 'sbx-conformance-commit:never'), (e) => isSbxError(e, 'not_available'));
        return t.skip('capabilities.commit is false: commit is not_available');
      }
      const id = await started({ env: { SBX_SECRETISH: 'box-only', KEPT: 'yes' } });
      const ref = `sbx-conformance-commit:${fx.runId}`.toLowerCase();
      let made: string | undefined;
      try {
        assert.equal((await rt.exec(id, ['sh', '-c', 'echo saved > /tmp/committed.txt'])).exitCode, 0);
        await rt.commit(id, ref, { labels: { 'sbx.test': 'commit' } });
        assert.equal((await rt.inspect(id)).status, 'running', 'left running');
        assert.ok(await rt.images.exists(ref));
        made = await started({ image: ref });
        const r = await rt.exec(made, ['sh', '-c', 'cat /tmp/committed.txt; echo "[$SBX_SECRETISH] [$KEPT]"']);
        assert.equal(r.stdout, 'saved\n[] [yes]\n');
      } finally {
        if (made) await rt.remove(made, { force: true });
        await rt.remove(id, { force: true });
        await rt.images.remove(ref, { force: true }).catch(() => undefined);
      }
    });

    test('force-remove takes a running container away', async () => {
      const id = await started();
      await assert.rejects(rt.remove(id), (e) => isSbxError(e, 'conflict'));
      await rt.remove(id, { force: true });
      await assert.rejects(rt.inspect(id), (e) => isSbxError(e, 'not_found'));
    });

    test("logs: the main process's output, stdout and stderr apart; follow ends with the process; tail, since", async () => {
      const id = await started({ cmd: ['sh', '-c', 'echo one; echo two >&2; echo three; until [ -e /tmp/go ]; do sleep 0.05; done; echo four; exit 3'] });
      try {
        const followed: LogChunk[] = [];
        const it = (await rt.logs(id, { follow: true }))[Symbol.asyncIterator]();
        // Each wait named: a hang here (seen once on gVisor under CI load) says which step it was.
        const next = (what: string) => within(it.next(), `${what} (followed so far: ${JSON.stringify(followed.map((c) => c.data))})`);
        while (!followed.some((c) => c.data === 'three\n')) {
          const n = await next("the follow's 'three'");
          assert.ok(!n.done, `the follow ended before 'three': ${JSON.stringify(followed)}`);
          followed.push(n.value);
        }
        // What the process writes after the follow began arrives too; then the process ends, and so does the follow.
        await within(rt.exec(id, ['touch', '/tmp/go']), 'the exec that ends the box command');
        for (let n = await next('the follow to end with the process'); !n.done; n = await next('the follow to end with the process')) followed.push(n.value);
        const all: LogChunk[] = [];
        for await (const c of await rt.logs(id)) all.push(c);
        // Each stream keeps its order; across the two the engine's copiers may interleave.
        const separate = caps.logStreams !== false;
        for (const got of [followed, all]) {
          assert.deepEqual(
            got.filter((c) => c.data !== 'two\n').map((c) => [c.stream, c.data]),
            [
              ['stdout', 'one\n'],
              ['stdout', 'three\n'],
              ['stdout', 'four\n'],
            ],
          );
          assert.deepEqual(
            got.filter((c) => c.data === 'two\n').map((c) => c.stream),
            [separate ? 'stderr' : 'stdout'],
          );
          for (const c of got) assert.ok(!Number.isNaN(Date.parse(c.time)), c.time);
        }
        assert.equal((await rt.inspect(id)).exitCode, 3);
        const tail: string[] = [];
        for await (const c of await rt.logs(id, { tail: 1 })) tail.push(c.data);
        assert.deepEqual(tail, ['four\n']);
        const since: string[] = [];
        const three = all.find((c) => c.data === 'three\n')!;
        for await (const c of await rt.logs(id, { since: three.time })) if (c.stream === 'stdout' && c.data !== 'two\n') since.push(c.data);
        assert.deepEqual(since, ['three\n', 'four\n'], 'from that chunk on, to the nanosecond');
        const recent: string[] = [];
        for await (const c of await rt.logs(id, { sinceMs: 3_600_000 })) recent.push(c.data);
        assert.equal(recent.length, 4);
        await assert.rejects(rt.logs(id, { tail: -1 }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'tail');
        await assert.rejects(rt.logs(id, { since: 'yesterday' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'since');
      } finally {
        await rt.remove(id, { force: true });
      }
    });

    test('a follow ends when the container is removed', async () => {
      const id = await started({ cmd: ['sh', '-c', "echo up; trap 'exit 0' TERM; while :; do sleep 1; done"] });
      const it = (await rt.logs(id, { follow: true }))[Symbol.asyncIterator]();
      assert.equal((await it.next()).value?.data, 'up\n');
      await rt.remove(id, { force: true });
      for (let n = await it.next(); !n.done; n = await it.next()) void n;
    });

    test('a follow of a running box ends when its signal aborts', async () => {
      const ac = new AbortController();
      const logs = await rt.logs(box, { follow: true, signal: ac.signal });
      const done = (async () => {
        for await (const _ of logs) void _;
      })();
      ac.abort();
      await done;
    });

    test('processes and stats describe a running container', async () => {
      const ps = await rt.processes(box);
      assert.ok(ps.some((p) => p.command.includes('sleep 86400')));
      const st = await rt.stats(box);
      assert.ok(st.memoryBytes > 0);
      assert.ok(st.pids >= 1);
      // Idle, the CPU rate is a number all the same (0 or near it), or null where not measured;
      // a read after a read too (Docker: measured from the earlier one).
      const again = await rt.stats(box);
      if (caps.cpuStats === false) assert.deepEqual([st.cpuPercent, again.cpuPercent], [null, null]);
      else assert.deepEqual([typeof st.cpuPercent, typeof again.cpuPercent], ['number', 'number']);
    });

    test('stats of a box burning a core: its CPU rate (where measured) and its memory limit', async () => {
      const id = await started({ memory: 48 * MiB, cmd: ['sh', '-c', 'while :; do :; done'] });
      try {
        // Each read is one engine sample (Docker: about 1 s apart): poll until one saw the loop run.
        const st =
          caps.cpuStats === false
            ? await rt.stats(id)
            : await waitFor(
                async () => {
                  const s = await rt.stats(id);
                  return (s.cpuPercent ?? 0) > 0 && s;
                },
                { what: 'a CPU rate above 0 for a busy box', intervalMs: 0 },
              );
        if (caps.cpuStats === false) assert.equal(st.cpuPercent, null);
        // The next read measures from this one (Docker: a one-shot read): the loop still runs.
        else assert.ok((await rt.stats(id)).cpuPercent! > 0, 'a read after a read sees the loop too');
        assert.ok(st.memoryBytes > 0, `memoryBytes ${st.memoryBytes}`);
        assert.equal(st.memoryLimitBytes, 48 * MiB);
      } finally {
        await rt.remove(id, { force: true });
      }
    });

    test('unknown ids are not_found for every call', async () => {
      const ghost = 'no-such-container-' + fx.runId;
      for (const call of [
        () => rt.inspect(ghost),
        () => rt.remove(ghost, { force: true }),
        () => rt.start(ghost),
        () => rt.stop(ghost),
        ...(caps.pause === false ? [] : [() => rt.pause(ghost), () => rt.unpause(ghost)]),
        ...(caps.commit === false ? [] : [() => rt.commit(ghost, 'sbx-conformance-ghost:1')]),
        () => rt.exec(ghost, ['true']),
        () => rt.execStream(ghost, ['true']),
        () => rt.processes(ghost),
        () => rt.logs(ghost),
      ]) {
        await assert.rejects(call(), (e) => isSbxError(e, 'not_found'));
      }
    });

    test('bad specs are invalid_argument naming the field', async () => {
      const cases: Array<[Partial<ContainerSpec>, string]> = [
        [{ image: '' }, 'image'],
        [{ memory: 10 }, 'memory'],
        [{ ports: [{ containerPort: 70000 }] }, 'ports.0.containerPort'],
        [{ binds: [{ hostPath: 'relative', containerPath: '/x' }] }, 'binds.0.hostPath'],
        [{ env: { 'BAD-NAME': 'x' } }, 'env.BAD-NAME'],
        [{ workDir: 'tmp' }, 'workDir'],
      ];
      for (const [extra, field] of cases) {
        await assert.rejects(rt.create({ ...spec(), ...extra }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === field);
      }
      await assert.rejects(rt.exec(box, []), (e) => isSbxError(e, 'invalid_argument'));
    });

    test('a missing image is not_found naming it', async (t) => {
      const ref = `sbx-absent-${fx.runId}:none`;
      // Docker refuses the create; on Kubernetes the pod is created and its start fails (the kubelet looks for the image).
      const createAndStart = async () => {
        const id = await rt.create(spec({ image: ref }));
        try {
          await rt.start(id);
        } finally {
          await rt.remove(id, { force: true }).catch(() => undefined);
        }
      };
      await assert.rejects(createAndStart(), (e) => isSbxError(e, 'not_found') && e.message.includes(ref));
      try {
        assert.equal(await rt.images.exists(ref), false);
        assert.equal(await rt.images.exists(fx.baseImage), true);
      } catch (e) {
        if (!isSbxError(e, 'not_available')) throw e;
        t.diagnostic(`images.exists cannot tell on this runtime: ${e.message}`);
      }
    });

    test('an unreachable engine is runtime_unavailable naming the address', async () => {
      const dead = fx.openUnreachable();
      await assert.rejects(dead.ping(), (e) => isSbxError(e, 'runtime_unavailable') && e.message.includes(dead.address));
      await assert.rejects(dead.list(), (e) => isSbxError(e, 'runtime_unavailable'));
      await assert.rejects(dead.exec('x', ['true']), (e) => isSbxError(e, 'runtime_unavailable'));
      await dead.close();
    });

    if (fx.pull) {
      const pull = fx.pull;
      test('pull from a registry reports typed progress events', async () => {
        await rt.images.remove(pull.ref, { force: true }).catch(() => undefined);
        const events = [];
        for await (const ev of rt.images.pull(pull.ref)) events.push(ev);
        assert.ok(events.length > 0);
        assert.ok(events.every((e) => typeof e.status === 'string'));
        assert.ok(
          events.some((e) => e.id !== undefined),
          'layer events carry ids',
        );
        assert.ok(events.some((e) => /Downloaded newer image|Image is up to date|Pull complete/.test(e.status)));
        assert.equal(await rt.images.exists(pull.ref), true);
        assert.ok((await rt.images.list()).some((i) => i.tags.includes(pull.ref)));
      });

      if (pull.authRef && pull.auth) {
        const { authRef, auth } = pull;
        test('pull from an authenticated registry needs the credentials', async () => {
          await rt.images.remove(authRef, { force: true }).catch(() => undefined);
          await assert.rejects(drain(rt.images.pull(authRef)), (e) => isSbxError(e) && /unauthorized|authentication|denied|no basic auth/i.test(e.message));
          await drain(rt.images.pull(authRef, { auth }));
          assert.equal(await rt.images.exists(authRef), true);
        });
      }

      test('pull of an absent image fails with a clear error', async () => {
        const ref = `${pull.ref.split('/')[0]}/sbx/absent-${fx.runId}:none`;
        await assert.rejects(drain(rt.images.pull(ref)), (e) => isSbxError(e, 'not_found') && e.message.includes('absent'));
      });

      test('pull from a registry the engine cannot reach is not_available naming the registry, never internal', async () => {
        // .invalid never resolves (RFC 2606); a closed port refuses.
        for (const [ref, registry] of [
          ['nosuchhost.invalid/img:1', 'nosuchhost.invalid'],
          ['127.0.0.1:1/sbx/nothing:latest', '127.0.0.1:1'],
        ] as const) {
          await assert.rejects(
            drain(rt.images.pull(ref)),
            (e) => isSbxError(e, 'not_available') && e.details?.['registry'] === registry && e.message.includes(`registry ${registry} cannot be reached`),
            ref,
          );
        }
      });
    }
  });
}

async function drain(it: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of it) {
    /* consume */
  }
}
