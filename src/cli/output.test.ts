/**
 * The CLI's renderers on their own: the pull display (terminal and plain), tables, relative
 * times, colour rules, and the profile resolution order. No server or engine needed.
 */
/* eslint-disable no-control-regex -- terminal output is what these tests read */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { PullRenderer, bar } from './pull-progress.js';
import { formatBytes, relativeTime, table, useColor } from './output.js';
import { formatLogLine, logDestination } from './log-format.js';
import { DEFAULT_URL, explain, profilePath, resolveConnection, writeProfiles } from './remote.js';
import { DEFAULT_URL as SDK_DEFAULT_URL, SbxError } from '../client/index.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-cli-out-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function sink(isTTY: boolean) {
  const out = { text: '', isTTY, write: (s: string) => (out.text += s) };
  return out;
}

const EVENTS = [
  { status: 'Pulling from sbx/pulltest', id: 'latest' },
  { status: 'Pulling fs layer', id: 'aaa' },
  { status: 'Pulling fs layer', id: 'bbb' },
  { status: 'Downloading', id: 'aaa', current: 500, total: 1000 },
  { status: 'Downloading', id: 'aaa', current: 900, total: 1000 },
  { status: 'Downloading', id: 'bbb', current: 1000, total: 3000 },
  { status: 'Download complete', id: 'aaa' },
  { status: 'Extracting', id: 'aaa', current: 1000, total: 1000 },
  { status: 'Pull complete', id: 'aaa' },
  { status: 'Download complete', id: 'bbb' },
  { status: 'Pull complete', id: 'bbb' },
  { status: 'Digest: sha256:abc' },
  { status: 'Status: Downloaded newer image for 127.0.0.1:5000/sbx/pulltest:latest' },
];

describe('images pull display', () => {
  test('plain: one line per change of a layer’s status, not per progress event, and a closing total', () => {
    const out = sink(false);
    const r = new PullRenderer(out, 'img');
    for (const ev of EVENTS) r.update(ev);
    r.finish();
    assert.equal(
      out.text,
      [
        'Pulling from sbx/pulltest',
        'aaa: Pulling fs layer',
        'bbb: Pulling fs layer',
        'aaa: Downloading',
        'bbb: Downloading',
        'aaa: Download complete',
        'aaa: Extracting',
        'aaa: Pull complete',
        'bbb: Download complete',
        'bbb: Pull complete',
        'Digest: sha256:abc',
        'Status: Downloaded newer image for 127.0.0.1:5000/sbx/pulltest:latest',
        'img: 2/2 layers, 3.9 KiB downloaded',
        '',
      ].join('\n'),
    );
    assert.doesNotMatch(out.text, /\x1b/);
  });

  test('terminal: a bar per layer and a total, redrawn in place', () => {
    const out = sink(true);
    const r = new PullRenderer(out, 'img', { intervalMs: 0 });
    for (const ev of EVENTS.slice(0, 6)) r.update(ev);
    assert.deepEqual(r.totals(), { current: 1900, total: 4000, layers: 2, done: 0 });
    // The last frame: cursor up over the previous block, then each line cleared and drawn.
    const frames = out.text.split(/\x1b\[\d+A/);
    const last = frames[frames.length - 1]!;
    assert.match(last, /\x1b\[2Kaaa: Downloading +\[=+> +\] 900 B\/1000 B\n/);
    assert.match(last, /\x1b\[2Kbbb: Downloading +\[=+> +\] 1000 B\/2\.9 KiB\n/);
    assert.match(last, /\x1b\[2KTotal: 0\/2 layers \[=+> +\] 1\.9 KiB\/3\.9 KiB\n$/);
    for (const ev of EVENTS.slice(6)) r.update(ev);
    r.finish();
    assert.match(out.text, /\x1b\[2KStatus: Downloaded newer image/);
    assert.match(out.text, /Total: 2\/2 layers \[=+\] 3\.9 KiB\/3\.9 KiB\n$/);
    assert.deepEqual(r.totals(), { current: 4000, total: 4000, layers: 2, done: 2 });
  });

  test('bar', () => {
    assert.equal(bar(0, 10, 10), '[          ]');
    assert.equal(bar(5, 10, 10), '[====>     ]');
    assert.equal(bar(10, 10, 10), '[==========]');
  });
});

describe('serve log lines', () => {
  const line = JSON.stringify({
    level: 50,
    time: Date.UTC(2026, 0, 2, 3, 4, 5, 6),
    pid: 1,
    hostname: 'h',
    name: 'sbx-server',
    msg: 'boom',
    box: 'sb-1',
    err: { message: 'bad', stack: 'Error: bad\n    at x' },
  });

  test('a pino line becomes time, level, message, fields, and the stack under it; not JSON passes through', () => {
    const text = formatLogLine(line + '\n', {});
    assert.match(text, /^\d\d:\d\d:\d\d\.006 ERROR boom box=sb-1\n {4}Error: bad\n {8}at x\n$/);
    assert.equal(formatLogLine('plain text', {}), 'plain text\n');
  });

  test('auto: readable on a terminal, JSON elsewhere', () => {
    const written: string[] = [];
    const stream = (isTTY: boolean) => ({ isTTY, write: (s: string) => written.push(s) }) as unknown as NodeJS.WriteStream;
    logDestination('auto', stream(false)).write(line + '\n');
    logDestination('auto', stream(true)).write(line + '\n');
    logDestination('json', stream(true)).write(line + '\n');
    logDestination('pretty', stream(false)).write(line + '\n');
    assert.deepEqual(
      written.map((w) => w.startsWith('{')),
      [true, false, true, false],
    );
  });
});

describe('human output', () => {
  test('tables align on visible width, colour codes included', () => {
    assert.equal(table(['A', 'LONG'], [['\x1b[32mxx\x1b[39m', 'y']], { isTTY: false }), 'A    LONG\n\x1b[32mxx\x1b[39m   y\n');
  });

  test('relative times and sizes', () => {
    const now = Date.parse('2026-01-01T12:00:00Z');
    assert.equal(relativeTime('2026-01-01T12:00:00Z', now), 'just now');
    assert.equal(relativeTime('2026-01-01T11:59:30Z', now), '30 seconds ago');
    assert.equal(relativeTime('2026-01-01T11:00:00Z', now), '1 hour ago');
    assert.equal(relativeTime('2025-12-29T12:00:00Z', now), '3 days ago');
    assert.equal(relativeTime('2026-01-01T12:10:00Z', now), 'in 10 minutes');
    assert.equal(formatBytes(512), '512 B');
    assert.equal(formatBytes(1536), '1.5 KiB');
    assert.equal(formatBytes(1024 ** 3), '1.0 GiB');
  });

  test('colour only on a terminal and never with NO_COLOR', () => {
    assert.equal(useColor({ isTTY: true }, {}), true);
    assert.equal(useColor({ isTTY: false }, {}), false);
    assert.equal(useColor({ isTTY: true }, { NO_COLOR: '1' }), false);
  });
});

describe('connection settings', () => {
  test('the CLI’s default server is the SDK’s (written out so that help need not load the SDK)', () => {
    assert.equal(DEFAULT_URL, SDK_DEFAULT_URL);
  });

  test('flags, then SBX_URL/SBX_API_KEY, then the profile; --profile beats the environment', async () => {
    const env = { XDG_CONFIG_HOME: join(dir, 'xdg'), HOME: join(dir, 'home') };
    const file = profilePath(env);
    assert.equal(file, join(dir, 'xdg', 'sbx', 'config.yaml'));
    assert.equal(profilePath({ HOME: '/h' }), '/h/.config/sbx/config.yaml');
    await writeProfiles(file, { current: 'a', profiles: { a: { url: 'http://a:1', apiKey: 'ka' }, b: { url: 'http://b:2', apiKey: 'kb' } } });
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(await pick({}, env), ['http://a:1', 'ka', 'profile']);
    assert.deepEqual(await pick({}, { ...env, SBX_URL: 'http://env:3', SBX_API_KEY: 'ke' }), ['http://env:3', 'ke', 'env']);
    assert.deepEqual(await pick({ url: 'http://flag:4' }, { ...env, SBX_URL: 'http://env:3' }), ['http://flag:4', 'ka', 'flag']);
    assert.deepEqual(await pick({ profile: 'b' }, { ...env, SBX_URL: 'http://env:3' }), ['http://b:2', 'kb', 'profile']);
    assert.deepEqual(await pick({}, { ...env, SBX_PROFILE: 'b' }), ['http://b:2', 'kb', 'profile']);
    assert.deepEqual(await pick({}, { HOME: join(dir, 'empty') }), ['http://127.0.0.1:7070', undefined, 'default']);
    await assert.rejects(resolveConnection({ profile: 'zz' }, env), /profile 'zz' is not in .*known: a, b/);
  });

  test('explain: unreachable names the URL and its source; 401 says how to get a key', async () => {
    const conn = await resolveConnection({ url: 'http://x:9', apiKey: 'k' }, { HOME: join(dir, 'empty') });
    const down = explain(
      new SbxError('runtime_unavailable', 'cannot reach the sbx server at http://x:9: ECONNREFUSED', { details: { url: 'http://x:9', errno: 'ECONNREFUSED' } }),
      conn,
    );
    assert.match(down, /^sbx: cannot reach the sbx server at http:\/\/x:9 \(from --url\): ECONNREFUSED\n.*`sbx serve`/);
    const refused = explain(new SbxError('unauthorized', 'API key is not valid'), conn);
    assert.match(refused, /the API key from --api-key was refused/);
    assert.match(refused, /sbx keys create NAME/);
  });
});

async function pick(flags: Parameters<typeof resolveConnection>[0], env: NodeJS.ProcessEnv) {
  const c = await resolveConnection(flags, env);
  return [c.url, c.apiKey, c.urlFrom];
}
