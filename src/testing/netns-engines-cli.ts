/**
 * `scripts/netns-engines.sh`'s work: brings network namespace engines (netns-engine.ts) up or
 * down by hand, for CI and developers. Usage: netns-engines-cli.ts up N… | down N… | down all
 */
import { listNetnsEngines, startNetnsEngine, stopNetnsEngine } from './netns-engine.js';

const [cmd, ...rest] = process.argv.slice(2);
const usage = 'usage: netns-engines.sh up N… | down N… | down all   (N in 1..9)';

async function main(): Promise<void> {
  if ((cmd !== 'up' && cmd !== 'down') || rest.length === 0) throw new Error(usage);
  const indexes = cmd === 'down' && rest.length === 1 && rest[0] === 'all' ? await listNetnsEngines() : rest.map(Number);
  await Promise.all(
    indexes.map(async (i) => {
      const t = performance.now();
      if (cmd === 'up') {
        const e = await startNetnsEngine(i);
        const did = e.start.did.length ? e.start.did.join('; ') : 'already up';
        console.log(`netns-engines: sbx-t${i} up at ${e.engineAddr}, namespace address ${e.address}: ${did} (${Math.round(performance.now() - t)} ms)`);
      } else {
        const did = await stopNetnsEngine(i);
        console.log(`netns-engines: sbx-t${i} down: ${did.length ? did.join('; ') : 'was not there'} (${Math.round(performance.now() - t)} ms)`);
      }
    }),
  );
}

main().catch((err: unknown) => {
  console.error(`netns-engines: error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
