import pino from 'pino';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Manager } from './src/sandbox/manager.js';
const m = new Manager({ name: `dbg-${process.pid}`, pools: [{ name: 'g', addr: 'local', ociRuntime: 'runsc', maxPerUser: 0 }], dataDir: mkdtempSync(join(tmpdir(), 'dbg-')), cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });
await m.start();
for (let i = 0; i < 5; i++) {
  const box: any = await m.create({ image: 'sbx-base:latest', pool: 'g' });
  await box.pause({ memory: 'release' });
  const ps = execFileSync('ps', ['-eo', 'pid,rss,args'], { encoding: 'utf8' }).split('\n').filter((l) => l.includes(box.containerId) && !l.includes('shim'));
  const t = Date.now();
  try { const r = await box.exec(['true']); console.log(i, 'ps', ps.length, 'exec', r.exitCode, Date.now() - t); } catch (e) { let c: any = e; while (c.cause) c = c.cause; console.log(i, 'ps', ps.length, 'ERR', c.statusCode, c.json, c.message); }
  await box.remove();
}
await m.close();
