/**
 * Child process of the large-file test: writes SIZE bytes into a workspace from a Readable and
 * streams them back, then prints one JSON line with timings and peak RSS. Run in its own process
 * so maxRSS measures only this.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { WorkspaceManager } from '../../workspace/manager.js';

const [dataDir, sizeArg] = process.argv.slice(2);
const size = Number(sizeArg);
const CHUNK = 64 * 1024; // what a file or socket stream delivers

function* generate(hash: ReturnType<typeof createHash>): Generator<Buffer> {
  for (let offset = 0, i = 0; offset < size; offset += CHUNK, i++) {
    const chunk = Buffer.alloc(Math.min(CHUNK, size - offset), i % 251);
    chunk.writeUInt32BE(i, 0);
    hash.update(chunk);
    yield chunk;
  }
}

const manager = new WorkspaceManager({ dataDir: dataDir as string });
const ws = await manager.create({ name: 'big', owner: 'perf', node: 'local' });
const fs = await manager.fs(ws.id);
const baselineRssKb = process.resourceUsage().maxRSS;

const written = createHash('sha256');
let started = performance.now();
await fs.writeFile('big.bin', Readable.from(generate(written)));
const writeMs = performance.now() - started;

const read = createHash('sha256');
let readBytes = 0;
started = performance.now();
for await (const chunk of await fs.createReadStream('big.bin')) {
  read.update(chunk as Buffer);
  readBytes += (chunk as Buffer).length;
}
const readMs = performance.now() - started;

const mb = size / (1024 * 1024);
console.log(
  JSON.stringify({
    bytes: size,
    readBytes,
    sameContent: written.digest('hex') === read.digest('hex'),
    writeMs,
    readMs,
    writeMBps: mb / (writeMs / 1000),
    readMBps: mb / (readMs / 1000),
    baselineRssMB: baselineRssKb / 1024,
    maxRssMB: process.resourceUsage().maxRSS / 1024,
  }),
);
