/** The config file's `server.e2b.templates` (template name → image), as sbx serve reads it. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { isSbxError } from '../../../errors.js';
import { readServerSection } from '../../config-file.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-e2b-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function file(text: string): string {
  const path = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(path, text);
  return path;
}

test('server.e2b.templates maps template names to images', () => {
  const section = readServerSection(file('server:\n  e2b:\n    templates:\n      base: sbx-e2b:latest\n      python: registry.example.com/py:3.12\n'));
  assert.deepEqual(section.e2b, { templates: { base: 'sbx-e2b:latest', python: 'registry.example.com/py:3.12' } });
});

test('a bad image reference or an unknown key is refused naming it', () => {
  assert.throws(
    () => readServerSection(file('server:\n  e2b:\n    templates:\n      base: "Not An Image"\n')),
    (e) => isSbxError(e, 'invalid_argument') && /server\.e2b\.templates\.base/.test(e.message),
  );
  assert.throws(
    () => readServerSection(file('server:\n  e2b:\n    template:\n      base: sbx-e2b:latest\n')),
    (e) => isSbxError(e, 'invalid_argument') && /e2b/.test(e.message),
  );
});
