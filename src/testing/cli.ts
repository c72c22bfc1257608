/**
 * `sbx …` run as a user runs it (`node --import tsx src/cli/main.ts …` in a child process) against
 * a test server, with a HOME of its own and none of the caller's SBX_* variables.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../cli/main.ts', import.meta.url));

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `sbx ...args` with SBX_URL/SBX_API_KEY set to `url`/`apiKey`; `onStdout` sees the output so far. */
export function runSbx(args: string[], opts: { url: string; apiKey: string; home: string; onStdout?: (out: string) => void }): Promise<CliRun> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    env: { ...env, HOME: opts.home, XDG_CONFIG_HOME: join(opts.home, '.config'), SBX_URL: opts.url, SBX_API_KEY: opts.apiKey, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    opts.onStdout?.(stdout);
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}
