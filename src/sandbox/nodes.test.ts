// A Manager's nodes survive its restart even when no pool names them yet: the node hub starts
// for what is on disk, and a Manager without nodes makes no node identity at all.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pino from 'pino';
import { testEnv } from '../testing/env.js';
import { joinedNodeOf } from '../testing/remote-node.js';
import { waitFor } from '../testing/wait.js';
import { Manager } from './manager.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-nodes-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));
const config = {
  name: `nodes-${process.pid}`,
  dataDir,
  cleanupIntervalMs: 0,
  logger: pino({ level: 'silent' }),
  pools: [{ name: 'local', addr: testEnv.engineAddr }],
};

test('joined nodes are known again after a restart, with no pool naming them; a Manager without nodes makes no identity', async () => {
  const first = new Manager(config);
  await first.start();
  assert.equal(existsSync(join(dataDir, 'nodes')), false, 'no node identity before there are nodes');
  const node = await joinedNodeOf(first, { name: 'kept' });
  try {
    await first.close();
    const second = new Manager(config);
    await second.start();
    try {
      assert.deepEqual(
        second.nodes().map((n) => n.name),
        ['kept'],
      );
      await waitFor(() => second.nodes()[0]?.state === 'online', { what: 'the direct node dialled again after the restart' });
    } finally {
      await second.close();
    }
  } finally {
    await node.close();
  }
});
