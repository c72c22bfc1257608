import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { DEFAULT_REMAP_SIZE, usernsOf } from './userns.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-userns-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function subids(uids: string, gids: string) {
  const subuid = join(dir, `subuid-${Math.random()}`);
  const subgid = join(dir, `subgid-${Math.random()}`);
  writeFileSync(subuid, uids);
  writeFileSync(subgid, gids);
  return { subuid, subgid };
}

const REMAPPED = { SecurityOptions: ['name=seccomp,profile=default', 'name=userns'], DockerRootDir: '/var/lib/docker/231072.231072' };

describe('usernsOf: the user namespace a Docker Engine runs boxes in, from docker info', () => {
  test('an engine without name=userns maps nothing, whatever its data root is called', async () => {
    assert.equal(await usernsOf({ SecurityOptions: ['name=seccomp,profile=default'], DockerRootDir: '/var/lib/docker/1.1' }, undefined), undefined);
    assert.equal(await usernsOf({ SecurityOptions: null, DockerRootDir: '/var/lib/docker' }, undefined), undefined);
    assert.equal(await usernsOf({}, undefined), undefined);
  });

  test("the host ids are the data root's <uid>.<gid>; the size is the subordinate range that starts there", async () => {
    const files = subids('someone:100000:65536\ndockremap:231072:4096\n', 'dockremap:231072:8192\nother:300000:10\n');
    assert.deepEqual(await usernsOf(REMAPPED, files), { hostUid: 231072, hostGid: 231072, size: 4096 }, 'the smaller of the two ranges');
    const gidsElsewhere = subids('dockremap:231072:65536\n', 'dockremap:500000:65536\n');
    assert.deepEqual(await usernsOf({ ...REMAPPED, DockerRootDir: '/data/docker/231072.500000/' }, gidsElsewhere), {
      hostUid: 231072,
      hostGid: 500000,
      size: 65536,
    });
  });

  test("without the machine's subordinate ids (an engine elsewhere, or none listed) the size is dockremap's default", async () => {
    assert.deepEqual(await usernsOf(REMAPPED, undefined), { hostUid: 231072, hostGid: 231072, size: DEFAULT_REMAP_SIZE });
    assert.deepEqual(await usernsOf(REMAPPED, { subuid: join(dir, 'missing'), subgid: join(dir, 'missing') }), {
      hostUid: 231072,
      hostGid: 231072,
      size: DEFAULT_REMAP_SIZE,
    });
  });

  test('a remapped engine whose data root does not name the ids is not_available, not a guess', async () => {
    await assert.rejects(usernsOf({ ...REMAPPED, DockerRootDir: '/var/lib/docker' }, undefined), (err: unknown) => {
      assert.ok(isSbxError(err, 'not_available'));
      assert.match(err.message, /data root '\/var\/lib\/docker' does not name the ids/);
      return true;
    });
  });
});
