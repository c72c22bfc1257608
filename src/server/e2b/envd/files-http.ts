/**
 * envd's plain-HTTP file routes: `GET /files?path=&username=` streams a file (gzip when the
 * client asks), `POST /files` writes one or more: multipart/form-data (each part's filename is its
 * destination unless ?path= names one) or application/octet-stream with `?path=` (optionally gzip-encoded). Answers
 * `[{name, type, path}]`; errors are envd's `{code, message}` with the HTTP status the SDK maps
 * (400, 401, 404, 507). Bodies stream both ways; nothing is held in memory whole.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { posix } from 'node:path';
import { PassThrough, Readable, finished } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import busboy from 'busboy';
import { SbxError, isSbxError } from '../../../errors.js';
import { resolveUserPath, type UserFS } from './user-fs.js';

const STATUS: Record<string, number> = {
  invalid_argument: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  quota_exceeded: 507,
  timeout: 504,
};

export type UserFSForUser = (username: string | undefined) => Promise<UserFS>;

interface WrittenFile {
  name: string;
  type: 'file';
  path: string;
  metadata?: Record<string, string>;
}

/** How one upload is written: as E2B's envd, which runs as root, and its metadata. */
interface Upload {
  uf: UserFS;
  metadata: Record<string, string> | undefined;
}

const METADATA_HEADER = 'x-metadata-';
const METADATA_KEY = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
const METADATA_VALUE = /^[\x20-\x7e]*$/;

/** The file metadata of `X-Metadata-<key>: <value>` headers (the SDK's `metadata` on write; envd 0.6.2), keys lowercased as envd stores them. */
function metadataOf(req: IncomingMessage): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  for (const [name, value] of Object.entries(req.headers)) {
    if (!name.startsWith(METADATA_HEADER) || value === undefined) continue;
    const key = name.slice(METADATA_HEADER.length);
    const v = Array.isArray(value) ? value[0]! : value;
    if (key === '') continue;
    if (!METADATA_KEY.test(key))
      throw new SbxError('invalid_argument', `invalid metadata: key ${JSON.stringify(key)} is not an HTTP token`, { details: { field: name } });
    // Refused, not dropped: a plain object (and the zod record box-fs checks metadata with) would
    // take `__proto__` as the prototype and lose the key silently.
    if (key.toLowerCase() === '__proto__')
      throw new SbxError('invalid_argument', 'invalid metadata: the key "__proto__" is not supported', { details: { field: name } });
    if (!METADATA_VALUE.test(v))
      throw new SbxError('invalid_argument', `invalid metadata: the value of ${JSON.stringify(key)} is not printable ASCII`, { details: { field: name } });
    (out ??= {})[key.toLowerCase()] = v;
  }
  return out;
}

/**
 * Writes one uploaded file as E2B's envd does: as root, creating missing parent directories
 * (mode 0755) and handing them and the file, new or replaced, to the requesting user; the
 * metadata becomes the file's `user.e2b.*` extended attributes (replacing a replaced file's).
 */
async function writeUpload(up: Upload, path: string, body: Readable): Promise<WrittenFile> {
  const files = up.uf.user === 'root' ? up.uf.files : up.uf.rootFiles;
  await files.writeFile(path, body, { ...(up.uf.user === 'root' ? {} : { owner: up.uf.user }), ...(up.metadata ? { metadata: up.metadata } : {}) });
  return { name: posix.basename(path), type: 'file', path, ...(up.metadata ? { metadata: up.metadata } : {}) };
}

function sendError(res: ServerResponse, err: unknown): void {
  const status = isSbxError(err) ? (STATUS[err.code] ?? 500) : 500;
  const message = err instanceof Error ? err.message : String(err);
  if (res.headersSent) {
    res.destroy(err instanceof Error ? err : undefined);
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ code: status, message }));
}

function sendJson(res: ServerResponse, body: unknown): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function wantsGzip(req: IncomingMessage): boolean {
  return /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
}

/** A client's broken body (bad gzip, a cut multipart form) as the caller's mistake: 400, never 500. */
function badBody(what: string, err: unknown): SbxError {
  return new SbxError('invalid_argument', `body: ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err, details: { field: 'body' } });
}

function decoded(req: IncomingMessage): Readable {
  const enc = String(req.headers['content-encoding'] ?? '').toLowerCase();
  if (enc === '' || enc === 'identity') return req;
  if (enc !== 'gzip') throw new SbxError('invalid_argument', `content-encoding ${enc} is not supported (gzip or none)`);
  // Not pipeline(): it would destroy the request, and with it the socket the 400 is sent on. The
  // output holds the first error for its reader (the box write starts later); until then the
  // no-op listener keeps a bad body from being an unhandled 'error' that ends the process.
  const gunzip = createGunzip();
  const out = new PassThrough();
  out.on('error', () => undefined);
  gunzip.on('error', (err) => out.destroy(badBody('not valid gzip', err)));
  // A client gone mid-body: the request closes without 'end' (and without 'error' when nothing else listens).
  finished(req, (err) => {
    if (err) out.destroy(err);
  });
  out.on('close', () => {
    req.unpipe(gunzip);
    gunzip.destroy();
  });
  req.pipe(gunzip).pipe(out);
  return out;
}

async function download(res: ServerResponse, req: IncomingMessage, uf: UserFS, path: string): Promise<void> {
  const st = await uf.files.stat(path);
  if (st.isDir) throw new SbxError('invalid_argument', `path is a directory: ${path}`);
  const body = await uf.files.createReadStream(path);
  const gzip = wantsGzip(req);
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-disposition': `attachment; filename*=UTF-8''${encodeURIComponent(posix.basename(path))}`,
    ...(gzip ? { 'content-encoding': 'gzip' } : { 'content-length': String(st.size) }),
  });
  await pipeline(gzip ? [body, createGzip(), res] : [body, res]);
}

/** The most a form field (a `file` part without a filename) may hold: busboy's default. */
const FIELD_MAX_BYTES = 1 << 20;
/** Fields and parts one form may have: a form beyond is refused, not held. */
const MAX_FIELDS = 16;
const MAX_PARTS = 1000;

async function uploadMultipart(req: IncomingMessage, up: Upload, pathParam: string | undefined): Promise<WrittenFile[]> {
  const { uf } = up;
  let parser: busboy.Busboy;
  try {
    // Fields (a `file` part without a filename) are held whole: a few, each bounded; bytes taken as
    // they came (latin1 maps each byte to one character and back).
    parser = busboy({
      headers: req.headers,
      preservePath: true,
      defCharset: 'latin1',
      limits: { fieldSize: FIELD_MAX_BYTES, fields: MAX_FIELDS, parts: MAX_PARTS },
    });
  } catch (err) {
    throw badBody('multipart form', err); // no boundary, an unknown type
  }
  const writes: Promise<WrittenFile>[] = [];
  let failed: ((err: unknown) => void) | undefined;
  const done = new Promise<void>((resolve, reject) => {
    // The first failure answers at once: a part nobody writes any more would stall the parser, and
    // the rest of the body is only drained.
    failed = (err) => {
      req.unpipe(parser);
      parser.removeAllListeners('file');
      parser.removeAllListeners('field');
      reject(err);
    };
    // A part named `file` without a filename (a plain form field, as `form.append('file', 'text')`
    // sends it) is a file too, as E2B's envd writes it: to ?path=, up to busboy's field size.
    parser.on('field', (name, value, info) => {
      if (name !== 'file') return;
      if (info.valueTruncated) {
        failed!(new SbxError('invalid_argument', `file: a form field without a filename holds at most ${FIELD_MAX_BYTES} bytes; send a file part`));
        return;
      }
      onFile(Readable.from([Buffer.from(value, 'latin1')]), undefined);
    });
    parser.on('file', (_field, stream, info) => onFile(stream, info.filename));
    function onFile(stream: Readable, filename: string | undefined): void {
      // As E2B's envd: ?path= first, else the part's filename.
      const dest = pathParam || filename;
      if (!dest) {
        stream.resume();
        failed!(new SbxError('invalid_argument', 'path: a file part needs a filename or ?path='));
        return;
      }
      const path = resolveUserPath(uf.home, dest);
      // The box filesystem consumes the part as it arrives; busboy waits for it before the next.
      const body = new PassThrough();
      // A body cut short fails the part too (busboy's "Unexpected end of form"): the write hears it
      // from the stream's state once it reads (it starts later, hence the no-op listener).
      body.on('error', () => undefined);
      stream.on('error', (err) => body.destroy(badBody('multipart form', err)));
      stream.pipe(body);
      const written = writeUpload(up, path, body);
      written.catch((err: unknown) => {
        stream.unpipe(body);
        stream.resume();
        failed!(err);
      });
      writes.push(written);
    }
    parser.on('error', (err) => failed!(badBody('multipart form', err)));
    const tooMany = (what: string, max: number) => () => failed!(new SbxError('invalid_argument', `multipart form: more than ${max} ${what}`));
    parser.on('fieldsLimit', tooMany('fields', MAX_FIELDS));
    parser.on('partsLimit', tooMany('parts', MAX_PARTS));
    finished(req, (err) => {
      if (err) failed!(err);
    });
    parser.on('close', resolve);
  });
  req.pipe(parser);
  await done;
  return Promise.all(writes);
}

async function uploadOctetStream(req: IncomingMessage, up: Upload, pathParam: string | undefined): Promise<WrittenFile[]> {
  if (!pathParam) throw new SbxError('invalid_argument', 'path: ?path= is required with application/octet-stream');
  return [await writeUpload(up, resolveUserPath(up.uf.home, pathParam), decoded(req))];
}

/** 405 for a method /files does not serve. */
export function sendMethodNotAllowed(req: IncomingMessage, res: ServerResponse): void {
  req.resume();
  res.writeHead(405, { allow: 'GET, POST', 'content-type': 'application/json' });
  res.end(JSON.stringify({ code: 405, message: `method ${req.method} is not allowed on /files` }));
}

/** Serves one `/files` request (the path prefix already removed). */
export async function handleFiles(req: IncomingMessage, res: ServerResponse, url: URL, userFS: UserFSForUser): Promise<void> {
  try {
    const pathParam = url.searchParams.get('path') ?? undefined;
    const uf = await userFS(url.searchParams.get('username') || undefined);
    if (req.method === 'GET') {
      if (!pathParam) throw new SbxError('invalid_argument', 'path: ?path= is required');
      await download(res, req, uf, resolveUserPath(uf.home, pathParam));
      return;
    }
    if (req.method === 'POST') {
      const type = String(req.headers['content-type'] ?? '');
      const up = { uf, metadata: metadataOf(req) };
      const written = type.startsWith('multipart/form-data') ? await uploadMultipart(req, up, pathParam) : await uploadOctetStream(req, up, pathParam);
      sendJson(res, written);
      return;
    }
    sendMethodNotAllowed(req, res);
  } catch (err) {
    req.resume();
    sendError(res, err);
  }
}
