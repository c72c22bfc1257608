/**
 * `sbx serve`'s process-wide handlers, in a child process of their own (node:test's own handlers
 * would catch the errors here): an unhandled 'error' event and an unawaited rejection are logged
 * with their stack, and the process lives on.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const moduleUrl = new URL('./process-errors.ts', import.meta.url).href;

test('an unhandled error event and an unawaited rejection are logged, and the process keeps running', async () => {
  // The bad events come from timers, as a server's next request would, not from the module body.
  const script = `
    import { EventEmitter } from 'node:events';
    import pino from 'pino';
    import { logUncaughtErrors } from ${JSON.stringify(moduleUrl)};
    logUncaughtErrors(pino({ level: 'info' }));
    setTimeout(() => new EventEmitter().emit('error', new Error('client bytes nobody listened for')), 0);
    setTimeout(() => void Promise.reject(new Error('a rejection nobody awaited')), 10);
    setTimeout(() => console.log('ALIVE'), 50);
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0, out);
  assert.match(out, /uncaught exception.*keeps serving/);
  assert.match(out, /client bytes nobody listened for/);
  assert.match(out, /unhandled promise rejection/);
  assert.match(out, /a rejection nobody awaited/);
  assert.match(out, /ALIVE/);
});
