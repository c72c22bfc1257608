import { Manager } from '../src/index.js';

const manager = new Manager(); // SBX_CONFIG and SBX_* settings, else one pool `local` on the local engine
await manager.start(); // recovers this instance's boxes, starts the cleanup loop

{
  await using box = await manager.create({ image: 'sbx-base:latest', owner: 'alice', idleTimeoutMs: 60_000 });
  const r = await box.exec(['sh', '-c', 'echo hi; exit 3'], { timeoutMs: 10_000 });
  console.log(r); // { exitCode: 3, stdout: 'hi\n', stderr: '', truncated: false, timedOut: false, durationMs: 3 }

  const s = await box.stream(['cat']); // live stdin/stdout/stderr
  s.stdout.pipe(process.stdout);
  s.stdin.end('streamed\n'); // a real half-close: cat sees EOF, its output still arrives
  console.log('cat exited with', await s.wait()); // resolves when the process has exited
} // `await using`: the box is removed here, at the end of its block

await manager.close(); // closes connections; boxes still running would keep running, and a new Manager recovers them
