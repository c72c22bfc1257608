/**
 * A small tar writer for `copyFromHost` of a directory: a host tree as a ustar stream (pax
 * headers for long names), files streamed with bounded memory. Only what a workspace holds:
 * directories, regular files, symlinks; other kinds are left out, as the library's copy does.
 * Here rather than a dependency, so the SDK's run-time dependencies stay `ws`.
 */
import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';

const BLOCK = 512;

interface Header {
  name: string;
  mode: number;
  size: number;
  mtimeS: number;
  type: '0' | '2' | '5' | 'x';
  linkname?: string;
}

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, '0') + '\0';
}

function header(h: Header): Buffer {
  const b = Buffer.alloc(BLOCK);
  b.write(h.name, 0, 100, 'utf8');
  b.write(octal(h.mode & 0o7777, 8), 100, 'ascii');
  b.write(octal(0, 8), 108, 'ascii');
  b.write(octal(0, 8), 116, 'ascii');
  b.write(octal(h.size, 12), 124, 'ascii');
  b.write(octal(Math.max(0, Math.floor(h.mtimeS)), 12), 136, 'ascii');
  b.write(' '.repeat(8), 148, 'ascii');
  b.write(h.type, 156, 'ascii');
  if (h.linkname) b.write(h.linkname, 157, 100, 'utf8');
  b.write('ustar\0', 257, 'ascii');
  b.write('00', 263, 'ascii');
  let sum = 0;
  for (const byte of b) sum += byte;
  b.write(octal(sum, 7) + ' ', 148, 'ascii');
  return b;
}

/** A pax record: "<len> key=value\n", where len counts itself. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

function* entryHeaders(h: Header): Generator<Buffer> {
  const longName = Buffer.byteLength(h.name) > 100;
  const longLink = h.linkname !== undefined && Buffer.byteLength(h.linkname) > 100;
  if (longName || longLink) {
    const pax = Buffer.from((longName ? paxRecord('path', h.name) : '') + (longLink ? paxRecord('linkpath', h.linkname!) : ''));
    yield header({ name: 'PaxHeader', mode: 0o644, size: pax.length, mtimeS: h.mtimeS, type: 'x' });
    yield pad(pax);
  }
  yield header(h);
}

function pad(data: Buffer): Buffer {
  const rest = data.length % BLOCK;
  return rest === 0 ? data : Buffer.concat([data, Buffer.alloc(BLOCK - rest)]);
}

/** The tree under `root` as tar bytes; entry names are relative to `root`. */
export async function* packHostTree(root: string): AsyncGenerator<Buffer> {
  yield* packDir(root, '');
  yield Buffer.alloc(BLOCK * 2);
}

async function* packDir(dir: string, prefix: string): AsyncGenerator<Buffer> {
  for (const name of (await readdir(dir)).sort()) {
    const path = join(dir, name);
    const rel = prefix + name;
    const st = await lstat(path);
    const mtimeS = st.mtimeMs / 1000;
    if (st.isDirectory()) {
      yield* entryHeaders({ name: `${rel}/`, mode: st.mode, size: 0, mtimeS, type: '5' });
      yield* packDir(path, `${rel}/`);
    } else if (st.isSymbolicLink()) {
      yield* entryHeaders({ name: rel, mode: st.mode, size: 0, mtimeS, type: '2', linkname: await readlink(path) });
    } else if (st.isFile()) {
      yield* entryHeaders({ name: rel, mode: st.mode, size: st.size, mtimeS, type: '0' });
      let written = 0;
      // Exactly the size the header promised, even if the file changes while it is read.
      for await (const chunk of createReadStream(path, { end: Math.max(0, st.size - 1), highWaterMark: 64 * 1024 })) {
        const buf = (chunk as Buffer).subarray(0, st.size - written);
        written += buf.length;
        if (buf.length > 0) yield buf;
      }
      if (written < st.size) yield Buffer.alloc(st.size - written);
      if (st.size % BLOCK !== 0) yield Buffer.alloc(BLOCK - (st.size % BLOCK));
    }
  }
}
