/**
 * The main job on the embedded default: one pool `local` on the local Docker Engine.
 * Creates a box, runs commands in it (buffered, then streaming with stdin), prints the
 * results and removes the box. Run with `npm run quickstart`.
 */
import { Manager } from '../src/index.js';

const image = process.env['SBX_QUICKSTART_IMAGE'] ?? 'sbx-base:latest';
const manager = new Manager();
await manager.start();

let id: string;
{
  const t0 = performance.now();
  await using box = await manager.create({ image, owner: 'quickstart', labels: { example: 'quickstart' } });
  id = box.id;
  console.log(`created box ${box.id} on pool ${box.pool} in ${(performance.now() - t0).toFixed(0)} ms`);

  const r = await box.exec(['sh', '-c', 'echo "hello from $SBX_SANDBOX_ID"; id; uname -sr']);
  console.log(`exec exit=${r.exitCode} in ${r.durationMs} ms:\n${r.stdout.trimEnd()}`);

  const s = await box.stream(['sh', '-c', 'tr a-z A-Z; echo "(stdin closed)" >&2']);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  s.stdout.on('data', (d: Buffer) => out.push(d));
  s.stderr.on('data', (d: Buffer) => err.push(d));
  s.stdin.end('streamed through stdin\n');
  const code = await s.wait();
  console.log(`stream exit=${code}: ${Buffer.concat(out).toString().trim()} ${Buffer.concat(err).toString().trim()}`);

  const info = await box.info();
  console.log(`info: status=${info.status} policy=${info.policy} owner=${info.owner} image=${info.image}`);
} // `await using` removes the box here

console.log(`removed ${id}; boxes left: ${(await manager.list()).length}`);
await manager.close();
