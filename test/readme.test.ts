/**
 * The README's code is the code in examples/: a block preceded by `<!-- examples/FILE -->` must
 * equal that file, except that the README imports the package as `'sbx-manager'` (`'sbx-sdk'`) where
 * the file, inside this repository, imports `'../src/index.js'` (`'../src/client/index.js'`). Every TypeScript block must be marked, so none
 * escapes the typecheck and the run in test/examples.test.ts.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Block {
  lang: string;
  code: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The file named by the marker just before the block, if any. */
  file: string | undefined;
}

/** The fenced blocks of a markdown text, with the `<!-- examples/… -->` marker before each. */
function fencedBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((l, j) => j > i && l === '```');
    assert.ok(end > i, `README.md:${i + 1}: unclosed code block`);
    const marker = /^<!-- (examples\/\S+) -->$/.exec(lines[i - 1] ?? '');
    blocks.push({ lang: open[1]!, code: lines.slice(i + 1, end).join('\n') + '\n', line: i + 1, file: marker?.[1] });
    i = end;
  }
  return blocks;
}

/** What the README shows for an example file: the package imported by its name. */
function asReadmeShowsIt(source: string): string {
  return source.replaceAll("from '../src/index.js'", "from 'sbx-manager'").replaceAll("from '../src/client/index.js'", "from 'sbx-sdk'");
}

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const blocks = fencedBlocks(readme);

test('every TypeScript block of the README names its file in examples/', () => {
  const ts = blocks.filter((b) => b.lang === 'ts' || b.lang === 'typescript');
  assert.ok(ts.length > 0, 'the README has TypeScript blocks');
  for (const b of ts)
    assert.ok(b.file?.endsWith('.ts'), `README.md:${b.line}: a \`\`\`${b.lang} block without <!-- examples/NAME.ts --> on the line before it`);
});

test('every marked README block is its examples/ file, byte for byte', () => {
  const marked = blocks.filter((b) => b.file !== undefined);
  assert.ok(marked.length >= 2, 'the library example and the config file are marked');
  for (const b of marked) {
    const path = `${ROOT}${b.file}`;
    assert.ok(existsSync(path), `README.md:${b.line}: ${b.file} does not exist`);
    assert.equal(
      b.code,
      asReadmeShowsIt(readFileSync(path, 'utf8')),
      `README.md:${b.line} differs from ${b.file}; copy the file into the README (or the other way round)`,
    );
  }
});

test('the marker scheme sees a changed line, a missing marker and an unmarked ts block', () => {
  const good = "<!-- examples/x.ts -->\n```ts\nimport { Manager } from 'sbx-manager';\n```\n";
  assert.deepEqual(fencedBlocks(good), [{ lang: 'ts', code: "import { Manager } from 'sbx-manager';\n", line: 2, file: 'examples/x.ts' }]);
  assert.equal(asReadmeShowsIt("import { Manager } from '../src/index.js';\n"), fencedBlocks(good)[0]!.code);
  assert.equal(fencedBlocks('text\n```ts\nx\n```\n')[0]!.file, undefined);
  assert.notEqual(fencedBlocks(good.replace('Manager }', 'Manager, SbxError }'))[0]!.code, asReadmeShowsIt("import { Manager } from '../src/index.js';\n"));
});
