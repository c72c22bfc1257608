/**
 * The node commands as a user runs them, in child processes against a real server on 127.0.0.1:
 * `sbx nodes token`, `sbx node join`, `sbx node` (the service, until SIGTERM), `sbx nodes ls`,
 * `drain`/`undrain`, `revoke`; a spent token and a bad flag fail with their messages.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { testEnv } from '../testing/env.js';
import { REMOTE_EXIT } from './remote.js';
import { freePort } from '../testing/remote-node.js';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { waitFor } from '../testing/wait.js';

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'sbx-cli-nodes-'));

function start(args: string[]): ChildProcess {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  return spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], { cwd: ROOT, env: { ...env, SBX_LOG_FORMAT: 'json' }, stdio: ['ignore', 'pipe', 'pipe'] });
}

async function sbx(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = start(args);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr };
}

describe('sbx node and sbx nodes', () => {
  let t: TestServer;
  let node: ChildProcess | undefined;
  let conn: string[];

  before(async () => {
    t = await startTestServer('cli-nodes', { config: { pools: [{ name: 'local', addr: testEnv.engineAddr }] } });
    conn = ['--url', t.url, '--api-key', t.admin];
  });
  after(async () => {
    if (node && node.exitCode === null) {
      const exited = new Promise((resolve) => node!.once('exit', resolve));
      node.kill('SIGTERM');
      await exited;
    }
    await t?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  test('token, join, serve, ls, drain, undrain, revoke; a spent token is refused', async () => {
    const made = await sbx(['nodes', 'token', '--ttl', '10m', ...conn]);
    assert.equal(made.code, 0, made.stderr);
    const token = made.stdout.trim();
    assert.match(token, /^sbxjoin_\S+$/);
    assert.match(made.stderr, /sbx node join .* --token sbxjoin_/);

    const listen = `127.0.0.1:${await freePort()}`;
    const nodeDir = join(dir, 'node');
    const joined = await sbx(['node', 'join', t.url, '--token', token, '--name', 'cli-node', '--listen', listen, '--data-dir', nodeDir]);
    assert.equal(joined.code, 0, joined.stderr);
    assert.match(joined.stdout, /joined .* as 'cli-node' \(direct\); Manager certificate sha256:[0-9a-f]{64}/);

    const again = await sbx(['node', 'join', t.url, '--token', token, '--name', 'cli-node-2', '--listen', listen, '--data-dir', join(dir, 'node2')]);
    assert.equal(again.code, REMOTE_EXIT.sbx);
    assert.match(again.stderr, /unauthorized: the join token is unknown, spent or expired/);

    node = start(['node', '--data-dir', nodeDir, '--engine', testEnv.engineAddr]);
    let nodeOut = '';
    node.stderr!.setEncoding('utf8').on('data', (d: string) => (nodeOut += d));
    await waitFor(() => nodeOut.includes(`sbx node 'cli-node' (direct) listening on ${listen}`), { what: `the node to listen (${nodeOut})` });
    const online = await waitFor(
      async () => {
        const ls = await sbx(['nodes', 'ls', '--json', ...conn]);
        const nodes = JSON.parse(ls.stdout) as { name: string; state: string; facts?: { engineVersion: string } }[];
        return nodes[0]?.state === 'online' && nodes[0];
      },
      { what: 'the node online in sbx nodes ls' },
    );
    assert.equal(online.name, 'cli-node');
    assert.match(online.facts?.engineVersion ?? '', /^\d+\./);
    const table = await sbx(['nodes', 'ls', ...conn]);
    assert.match(table.stdout, /^NAME\s+STATE\s+MODE\s+ADDRESS/);
    assert.match(table.stdout, new RegExp(`cli-node\\s+online\\s+direct\\s+${listen.replace(/\./g, '\\.')}`));

    assert.deepEqual((await sbx(['nodes', 'drain', 'cli-node', ...conn])).stdout, 'cli-node: draining\n');
    assert.deepEqual((await sbx(['nodes', 'undrain', 'cli-node', ...conn])).stdout, 'cli-node: taking new boxes\n');
    const unknown = await sbx(['nodes', 'drain', 'nope', ...conn]);
    assert.equal(unknown.code, REMOTE_EXIT.sbx);
    assert.match(unknown.stderr, /not_found: no node named 'nope'/);

    assert.equal((await sbx(['nodes', 'revoke', 'cli-node', ...conn])).stdout, 'cli-node: revoked\n');
    const after = JSON.parse((await sbx(['nodes', 'ls', '--json', ...conn])).stdout) as { state: string; revokedAt?: string }[];
    assert.equal(after[0]!.state, 'revoked');
    assert.ok(after[0]!.revokedAt);
  });

  test('usage: a join without --listen or --reverse says what it needs; --help names the modes', async () => {
    const r = await sbx(['node', 'join', 'http://127.0.0.1:1', '--token', 'x', '--name', 'n1', '--data-dir', join(dir, 'usage')]);
    assert.equal(r.code, REMOTE_EXIT.sbx);
    assert.match(r.stderr, /invalid_argument: listen: .*--listen host:port.*--reverse/);
    const help = await sbx(['node', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /sbx node join http:\/\/10\.0\.0\.1:7070 --token sbxjoin_… --name gpu-1 --listen 10\.0\.0\.2:7443/);
  });
});
