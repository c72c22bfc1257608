/**
 * Box isolation across a restart of dockerd, which rewrites its own iptables chains. The engine is a
 * second, disposable dockerd in a network namespace of its own (scripts/engine2.sh, under a name of
 * this file's); sbx's side runs in that namespace too (`ip netns exec`), so the bridges and the
 * firewall it installs are that namespace's, as on a machine where sbx and the engine share one.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';

const run = promisify(execFile);
const NAME = `sbx-netfw${process.pid % 10000}`;
const SCRIPT = fileURLToPath(new URL('../../../scripts/engine2.sh', import.meta.url));
const RUNTIME = fileURLToPath(new URL('./runtime.ts', import.meta.url));
const runId = testRunId('box-network-restart');
const env = { ...process.env, SBX_ENGINE2_NAME: NAME, SBX_ENGINE2_IMAGES: testEnv.baseImage };
let addr = '';

async function engine2(...args: string[]): Promise<string> {
  const { stdout } = await run('bash', [SCRIPT, ...args], { timeout: 180_000, env });
  return stdout.trim();
}

/** Runs `body` (an async function body with `rt`, a DockerRuntime on engine2, and `net`) in the engine's namespace; its JSON result. */
async function inNamespace<T>(body: string): Promise<T> {
  const script = `const { DockerRuntime } = await import(${JSON.stringify(RUNTIME)});
    const net = await import('node:net');
    const rt = new DockerRuntime(${JSON.stringify(addr)});
    try { console.log(JSON.stringify(await (async () => { ${body} })())); } finally { await rt.close(); }`;
  const { stdout } = await run('ip', ['netns', 'exec', NAME, process.execPath, '--import', 'tsx', '--input-type=module', '-e', script], {
    timeout: 120_000,
    env,
  });
  return JSON.parse(stdout.trim().split('\n').pop()!) as T;
}

/** In the namespace: a server of its host on 0.0.0.0, and whether box `id` connects to it at its gateway. */
const REACHES_HOST = (id: string) => `
  const server = net.createServer((s) => s.end());
  await new Promise((r) => server.listen(0, '0.0.0.0', r));
  try {
    const route = (await rt.exec(${JSON.stringify(id)}, ['cat', '/proc/net/route'])).stdout;
    const hex = route.split('\\n').find((l) => l.split(/\\s+/)[1] === '00000000').split(/\\s+/)[2];
    const gw = [3, 2, 1, 0].map((i) => parseInt(hex.slice(i * 2, i * 2 + 2), 16)).join('.');
    const r = await rt.exec(${JSON.stringify(id)}, ['sh', '-c', 'nc -w 2 ' + gw + ' ' + server.address().port + ' </dev/null']);
    return r.exitCode === 0;
  } finally { server.close(); }`;

before(async () => {
  await engine2('up');
  addr = /unix:\/\/\S+/.exec(await engine2('env'))?.[0] ?? '';
  assert.ok(addr, 'engine2 has a socket');
});

after(async () => {
  await engine2('down');
});

test("a restart of dockerd keeps the firewall and the boxes' network: a box started again after it still cannot reach the host", async () => {
  const id = await inNamespace<string>(`
    const id = await rt.create({ image: ${JSON.stringify(testEnv.baseImage)}, labels: { ${JSON.stringify(TEST_LABEL)}: ${JSON.stringify(runId)} } });
    await rt.start(id);
    return id;`);
  try {
    assert.equal(await inNamespace<boolean>(REACHES_HOST(id)), false, 'closed before the restart');
    await engine2('restart');
    const rules = (await run('ip', ['netns', 'exec', NAME, 'iptables', '-w', '-S'])).stdout;
    assert.match(rules, /^-A INPUT -i sbx-boxes\+ -j SBX-BOXES-IN$/m, 'the INPUT jump survived');
    assert.match(rules, /^-A SBX-BOXES-IN -j REJECT --reject-with icmp-admin-prohibited$/m);
    assert.match(rules, /^-A FORWARD -i sbx-boxes0 -o sbx-boxes0 -j DROP$/m, "Docker's own box-to-box rule is back");
    // Only a start (what the Manager's revive does: boxes have no engine restart policy) and an
    // exec from here on: nothing reinstalls the rules (a create would).
    const again = await inNamespace<boolean>(`
      await rt.start(${JSON.stringify(id)});
      ${REACHES_HOST(id)}`);
    assert.equal(again, false, 'the box started again after the restart is still closed to the host');
  } finally {
    await inNamespace(`await rt.remove(${JSON.stringify(id)}, { force: true }); return true;`);
  }
});
