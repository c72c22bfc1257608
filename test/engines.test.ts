/**
 * The Node.js the package promises (package.json `engines.node`, the README's "Node.js ≥ 20") is
 * one every installed dependency supports: `npm ci` warned EBADENGINE when fastify's
 * light-my-request pulled cookie@2 (Node ≥ 22). CI runs this on the Node it promises.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import semver from 'semver';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function packageDirs(modules: string): string[] {
  return readdirSync(modules, { withFileTypes: true }).flatMap((e) => {
    if (!e.isDirectory() || e.name.startsWith('.')) return [];
    const dir = join(modules, e.name);
    if (e.name.startsWith('@')) return packageDirs(dir);
    const nested = join(dir, 'node_modules');
    return [dir, ...(readdirSync(dir).includes('node_modules') ? packageDirs(nested) : [])];
  });
}

test('every installed package supports the Node.js this package promises, and this Node is one of them', () => {
  const promised = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;
  assert.ok(semver.satisfies(process.version, promised), `${process.version} is not ${promised}`);
  const floor = semver.minVersion(promised)!.major;
  const refusing: string[] = [];
  let checked = 0;
  for (const dir of packageDirs(join(ROOT, 'node_modules'))) {
    let pkg: { name?: string; version?: string; engines?: { node?: string } };
    try {
      pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    } catch {
      continue; // a folder without a package.json (a package's own data)
    }
    const wants = pkg.engines?.node;
    if (typeof wants !== 'string' || !semver.validRange(wants)) continue;
    checked++;
    // The promise is the whole major line: its latest release must do.
    if (!semver.satisfies(`${floor}.99.0`, wants) || !semver.satisfies(process.version, wants)) refusing.push(`${pkg.name}@${pkg.version} wants node ${wants}`);
  }
  assert.ok(checked > 20, `only ${checked} packages declare engines: the walk found too little`);
  assert.deepEqual(refusing, []);
});
