/**
 * envd, the e2b SDK's in-box API, served by sbx for every box at one URL (`E2B_SANDBOX_URL`,
 * `<server>/e2b/envd`): the SDK names the box in `E2b-Sandbox-Id` and proves access with the
 * box's `X-Access-Token`; the user is the Basic username of `Authorization` (none: the box's
 * default user). Connect RPCs (process.Process, filesystem.Filesystem) go to @connectrpc's Node
 * handler, `/files` and `/health` are plain HTTP. Nothing runs in the box but through sbx's own
 * Box API (exec streams, `box.files()`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import type { DescService } from '@bufbuild/protobuf';
import { Code, ConnectError, createContextKey, createContextValues } from '@connectrpc/connect';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError, isSbxError, type ErrorCode } from '../../../errors.js';
import type { Box, LocalBox } from '../../../sandbox/index.js';
import type { ServerContext } from '../../context.js';
import { retryAfterSeconds } from '../../errors.js';
import { sandboxOfSignature, sandboxOfToken, verifyEnvdAccessToken } from '../access-token.js';
import { renewEndedLifetime, stateOf } from '../api/sandboxes.js';
import { handleFiles, sendMethodNotAllowed } from './files-http.js';
import { filesystemService } from './filesystem-service.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import { dropConnectionKey, processService } from './process-service.js';
import { ProcessTable } from './process-table.js';
import { serveStart, servesStart, type StartImpl } from './start-fast.js';
import type { UserFS } from './user-fs.js';

export const ENVD_PREFIX = '/e2b/envd';
/**
 * Where the SDK's signed file URLs arrive: `new URL('/files', E2B_SANDBOX_URL)` is `/files` at the
 * root of sbx's server, whatever path E2B_SANDBOX_URL has (sbx's own API is /v1, e2b's /e2b).
 */
export const SIGNED_FILES_PATH = '/files';
/**
 * The largest Connect request message (a unary body or one streamed message, e.g. a chunk of
 * stdin) read, after decompression: @connectrpc checks an envelope's length header before
 * buffering it and inflates gzip/brotli with this as zlib's maxOutputLength, so neither a huge
 * length nor a compression bomb is held whole. Beyond it: resource_exhausted. Connect's own default
 * is 4 GiB; the SDKs send stdin in small chunks and no envd RPC carries file contents (those go
 * through /files, streamed).
 */
export const ENVD_READ_MAX_BYTES = 16 * 1024 * 1024;
/**
 * The longest Connect-Timeout-Ms taken (24.8 days): Node runs a timer set any longer after 1 ms,
 * which would end the call and kill its process at once. Longer is invalid_argument.
 */
export const ENVD_MAX_TIMEOUT_MS = 2 ** 31 - 1;
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];
/** e2b's default account in its templates; a box without it acts as its uid 1000, else root. */
const E2B_USER = 'user';

/** What one envd request acts on: its box, and the user it acts as with that user's home. */
interface EnvdCaller {
  box: Box;
  user: string;
  home: string;
}

/** The caller's filesystem surfaces, built only for the requests that touch files (a process RPC needs none). */
function userFsOf(c: EnvdCaller): UserFS {
  return { boxId: c.box.id, files: c.box.files({ user: c.user }), rootFiles: c.box.files({ user: 'root' }), user: c.user, home: c.home };
}

const CONNECT_CODES: Partial<Record<ErrorCode, Code>> = {
  invalid_argument: Code.InvalidArgument,
  not_found: Code.NotFound,
  conflict: Code.AlreadyExists,
  forbidden: Code.PermissionDenied,
  unauthorized: Code.Unauthenticated,
  limit_exceeded: Code.ResourceExhausted,
  quota_exceeded: Code.ResourceExhausted,
  timeout: Code.DeadlineExceeded,
  cancelled: Code.Canceled,
  not_available: Code.FailedPrecondition,
  runtime_unavailable: Code.Unavailable,
};

function toConnectError(err: unknown): unknown {
  if (err instanceof ConnectError || !isSbxError(err)) return err;
  return new ConnectError(err.message, CONNECT_CODES[err.code] ?? Code.Internal, undefined, undefined, err);
}

/** The service with every SbxError turned into the Connect code the SDK maps to its own errors. */
function mapErrors<S extends DescService>(service: S, impl: Partial<ServiceImpl<S>>): Partial<ServiceImpl<S>> {
  const out: Record<string, unknown> = {};
  for (const method of service.methods) {
    const fn = (impl as Record<string, ((req: unknown, ctx: HandlerContext) => unknown) | undefined>)[method.localName];
    if (!fn) continue;
    out[method.localName] =
      method.methodKind === 'server_streaming'
        ? async function* (req: unknown, ctx: HandlerContext) {
            try {
              yield* fn(req, ctx) as AsyncIterable<unknown>;
            } catch (err) {
              throw toConnectError(err);
            }
          }
        : async (req: unknown, ctx: HandlerContext) => {
            try {
              return await fn(req, ctx);
            } catch (err) {
              throw toConnectError(err);
            }
          };
  }
  return out as Partial<ServiceImpl<S>>;
}

/** The Basic username of `Authorization` (the SDK's way of naming the user), if any. */
export function basicUser(authorization: string | undefined): string | undefined {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(authorization ?? '');
  if (!m) return undefined;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const name = decoded.slice(0, decoded.indexOf(':') === -1 ? undefined : decoded.indexOf(':'));
  return name === '' ? undefined : name;
}

interface Account {
  name: string;
  uid: string;
  home: string;
}

/** An /etc/passwd larger than this is not read: the box controls it, and the server reads it unasked. */
const PASSWD_MAX_BYTES = 1024 * 1024;

/** A file's text, refused (and its read ended) past `max` bytes. */
async function readBounded(stream: Readable, max: number, path: string): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    size += (chunk as Buffer).length;
    if (size > max) {
      stream.destroy();
      throw new SbxError('invalid_argument', `${path} in the sandbox is larger than ${max} bytes; its accounts are not read`, { details: { path } });
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The box's accounts from its /etc/passwd (read as root once per box; it changes rarely). */
class Accounts {
  private readonly byBox = new Map<string, Promise<Account[]>>();

  async of(box: Box): Promise<Account[]> {
    // By box and container: a later box under the same id may run another image, and an archived
    // box has no container id ('') to tell it from another.
    const key = `${box.id}/${box.containerId}`;
    let accounts = this.byBox.get(key);
    if (!accounts) {
      if (this.byBox.size >= 1024) this.byBox.clear();
      accounts = (async () => {
        const passwd = await readBounded(await box.files({ user: 'root' }).createReadStream('/etc/passwd'), PASSWD_MAX_BYTES, '/etc/passwd');
        return passwd
          .split('\n')
          .map((line) => line.split(':'))
          .filter((f) => f.length >= 7)
          .map((f) => ({ name: f[0]!, uid: f[2]!, home: f[5] || '/' }));
      })();
      accounts.catch(() => this.byBox.delete(key));
      this.byBox.set(key, accounts);
    }
    return accounts;
  }

  /** The named user, or the box's default: `user`, else uid 1000, else root. */
  async resolve(box: Box, name: string | undefined): Promise<Account> {
    const accounts = await this.of(box);
    if (name !== undefined) {
      const found = accounts.find((a) => a.name === name || a.uid === name);
      if (!found) throw new SbxError('invalid_argument', `user: no user ${JSON.stringify(name)} in the sandbox's /etc/passwd`, { details: { field: 'user' } });
      return found;
    }
    return (
      accounts.find((a) => a.name === E2B_USER) ??
      accounts.find((a) => a.uid === '1000') ??
      accounts.find((a) => a.uid === '0') ?? { name: 'root', uid: '0', home: '/root' }
    );
  }
}

export function envdRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const table = new ProcessTable();
  const accounts = new Accounts();
  const { limiter } = app.sbxAuth;
  const callerKey = createContextKey<Promise<EnvdCaller> | undefined>(undefined);
  const callers = new WeakMap<IncomingMessage, Promise<EnvdCaller>>();

  /** The box of a request, once its access token checked out. A box that is gone is not running (502, Unavailable). */
  const boxOf = async (req: IncomingMessage): Promise<LocalBox> => {
    const header = req.headers['e2b-sandbox-id'];
    const token = typeof req.headers['x-access-token'] === 'string' ? req.headers['x-access-token'] : undefined;
    const address = req.socket.remoteAddress ?? '';
    let id = typeof header === 'string' ? header : '';
    try {
      // Wrong tokens count toward the address's auth-failure limit; a right one always passes.
      return await limiter.guard(address, async () => {
        try {
          // No E2b-Sandbox-Id (older Python SDKs after Sandbox.connect): the token names the box.
          if (id === '') id = await sandboxOfToken(ctx.manager, ctx.keys, token);
          return await verifyEnvdAccessToken(ctx.manager, ctx.keys, id, token);
        } catch (err) {
          // An unknown id (a removed box, or a guess) counts as a failure as well: its 502 differs
          // from a wrong token's 401, so without the count ids could be probed without limit.
          if (isSbxError(err) && err.code === 'not_found') limiter.failed(address, err);
          throw err;
        }
      });
    } catch (err) {
      if (isSbxError(err) && (err.code === 'unauthorized' || err.code === 'limit_exceeded' || err.code === 'not_found')) ctx.metrics.authFailures.inc();
      // "was not found" is what e2b's proxy says of a sandbox that is gone: the Python SDK reads it
      // as SandboxNotRunningException (any other 502 as SandboxUnreachableException, state unknown).
      if (isSbxError(err) && err.code === 'not_found') {
        throw new SbxError('runtime_unavailable', `sandbox ${id || 'of this X-Access-Token'} was not found: it is not running (killed, or past its timeout)`, {
          cause: err,
        });
      }
      throw err;
    }
  };

  const callerFor = async (box: Box, username: string | undefined): Promise<EnvdCaller> => {
    const account = await accounts.resolve(box, username);
    return { box, user: account.name, home: account.home };
  };

  const resolve = async (hctx: HandlerContext): Promise<EnvdCaller> => {
    const caller = hctx.values.get(callerKey);
    if (!caller) throw new ConnectError('no sandbox for this request', Code.Internal);
    return caller;
  };
  const userFS = async (hctx: HandlerContext): Promise<UserFS> => userFsOf(await resolve(hctx));

  const processImpl = mapErrors(
    Process,
    processService(
      table,
      async (h) => resolve(h),
      async (id) =>
        ctx.manager.get(id).then(
          () => false,
          (err: unknown) => isSbxError(err) && err.code === 'not_found',
        ),
    ),
  );
  const contextValuesOf = (req: IncomingMessage) =>
    createContextValues()
      .set(callerKey, callers.get(req))
      .set(dropConnectionKey, () => req.socket.destroy());
  const rpc = connectNodeAdapter({
    requestPathPrefix: ENVD_PREFIX,
    readMaxBytes: ENVD_READ_MAX_BYTES,
    maxTimeoutMs: ENVD_MAX_TIMEOUT_MS,
    grpc: false,
    grpcWeb: false,
    contextValues: (req) => contextValuesOf(req as IncomingMessage),
    routes: (router) => {
      router.service(Process, processImpl);
      router.service(Filesystem, mapErrors(Filesystem, filesystemService(userFS)));
    },
  });
  const start = processImpl.start as StartImpl;

  /** The box of a signed file URL (no sandbox id, no token: the signature names both). */
  const signedBoxOf = async (req: IncomingMessage, url: URL): Promise<LocalBox> => {
    const q = url.searchParams;
    const signature = q.get('signature');
    if (!signature) {
      throw new SbxError(
        'unauthorized',
        "missing signature query parameter: /files needs a signed URL (signature=…, as sandbox.downloadUrl()/uploadUrl() build it) or the sandbox's X-Access-Token",
      );
    }
    const expiration = q.get('signature_expiration') ?? undefined;
    if (expiration !== undefined) {
      if (!/^\d{1,15}$/.test(expiration))
        throw new SbxError('invalid_argument', 'signature_expiration: Unix seconds are required', { details: { field: 'signature_expiration' } });
      const now = Math.floor(Date.now() / 1000);
      // Checked before the search: an expired URL costs nothing, and says nothing a forger could not write.
      if (Number(expiration) < now) throw new SbxError('unauthorized', 'signature is already expired'); // E2B's words, which its SDK's tests compare whole
    }
    const address = req.socket.remoteAddress ?? '';
    try {
      // The search costs boxes × keys hashes: from an address over the failure limit only a URL
      // that matched before passes (O(1)); any other gets the limit's 429 without the search.
      const search = !limiter.over(address);
      const id = await limiter.guard(address, () =>
        sandboxOfSignature(
          ctx.manager,
          ctx.keys,
          {
            path: q.get('path') ?? '',
            operation: req.method === 'POST' ? 'write' : 'read',
            user: q.get('username') ?? '',
            signature,
            // As envd signs it: the number, printed again.
            ...(expiration === undefined ? {} : { expiration: String(Number(expiration)) }),
          },
          { search },
        ),
      );
      return await ctx.manager.get(id);
    } catch (err) {
      if (isSbxError(err) && (err.code === 'unauthorized' || err.code === 'limit_exceeded')) ctx.metrics.authFailures.inc();
      if (isSbxError(err) && err.code === 'not_found')
        throw new SbxError('runtime_unavailable', `sandbox of this signed URL was not found: it is not running`, { cause: err });
      throw err;
    }
  };

  /** `/files` at the server's root: a signed URL, or (as envd checks first) the sandbox's X-Access-Token. */
  const serveRootFiles = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.headers['x-access-token'] !== undefined) return serve(req, res, '/files');
    const url = new URL(req.url ?? '/', 'http://envd');
    // As /e2b/envd/files answers them, before any signature is looked for.
    if (req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'POST') return sendMethodNotAllowed(req, res);
    let box: LocalBox;
    try {
      box = await signedBoxOf(req, url);
      await renewEndedLifetime(box);
    } catch (err) {
      refuse(req, res, err);
      return;
    }
    await handleFiles(req, res, url, async (username) => userFsOf(await callerFor(box, username)));
  };

  const serve = async (req: IncomingMessage, res: ServerResponse, envdPath?: string): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://envd');
    const path = envdPath ?? url.pathname.slice(ENVD_PREFIX.length);
    let box: LocalBox;
    try {
      box = await boxOf(req);
    } catch (err) {
      refuse(req, res, err);
      return;
    }
    // The SDK asks after a dropped request whether the sandbox still runs (and isRunning() asks):
    // 502 when it does not (above), or is paused (a read: it stays paused), as e2b answers.
    if (path === '/health') {
      if (stateOf(box) === 'paused') sendEnvdError(res, new SbxError('runtime_unavailable', `sandbox ${box.id} is paused: Sandbox.connect resumes it`));
      else res.writeHead(204).end();
      return;
    }
    // Every other call is use, which resumes a paused sandbox: it gets a timeout again first.
    try {
      await renewEndedLifetime(box);
    } catch (err) {
      refuse(req, res, err);
      return;
    }
    if (path === '/files') {
      await handleFiles(req, res, url, async (username) => userFsOf(await callerFor(box, username)));
      return;
    }
    const caller = callerFor(box, basicUser(req.headers.authorization));
    caller.catch(() => undefined);
    callers.set(req, caller);
    coalesceWrites(res);
    if (servesStart(req, path))
      await serveStart(req, res, start, { contextValues: contextValuesOf(req), readMaxBytes: ENVD_READ_MAX_BYTES, maxTimeoutMs: ENVD_MAX_TIMEOUT_MS });
    else rpc(req, res);
  };

  /** A handler that answers on the raw response, tracked so a shutdown can end it. */
  const hijacked =
    (fn: (req: IncomingMessage, res: ServerResponse) => Promise<void>) =>
    async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
      reply.hijack();
      const done = new Promise<void>((resolveDone) => reply.raw.once('close', resolveDone));
      ctx.streams.add({ done, abort: () => reply.raw.destroy() });
      await fn(req.raw, reply.raw).catch((err: unknown) => sendEnvdError(reply.raw, err));
    };

  void app.register(async (scope) => {
    // Bodies stay unread: Connect and the /files routes stream them.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    scope.route({
      method: METHODS,
      url: `${ENVD_PREFIX}/*`,
      config: { auth: 'box' }, // the box's X-Access-Token, checked per request below
      schema: { hide: true },
      handler: hijacked((req, res) => serve(req, res)),
    });
    scope.route({
      method: METHODS,
      url: SIGNED_FILES_PATH,
      config: { auth: 'box' }, // the URL's signature (or X-Access-Token), checked per request
      schema: { hide: true },
      handler: hijacked(serveRootFiles),
    });
  });
}

/**
 * Writes to `res` within one event-loop turn leave in one packet: Connect writes every message of
 * a stream (a process's start, its output, its end) as a write of its own, and Node sends each
 * alone, so a short command cost the server a syscall and the SDK a read and a parse per message.
 * The socket is held corked from a turn's first write to the turn's end (setImmediate), so
 * nothing waits longer than the turn that produced it.
 */
function coalesceWrites(res: ServerResponse): void {
  const write = res.write.bind(res) as (...args: unknown[]) => boolean;
  let corked: Socket | undefined;
  const flush = (): void => {
    corked?.uncork();
    corked = undefined;
  };
  res.write = ((...args: unknown[]): boolean => {
    if (!corked && res.socket) {
      corked = res.socket;
      corked.cork();
      setImmediate(flush);
    }
    return write(...args);
  }) as ServerResponse['write'];
}

const HTTP_STATUS: Partial<Record<ErrorCode, number>> = {
  invalid_argument: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  limit_exceeded: 429,
  runtime_unavailable: 502,
};

/** envd's error body `{code, message}` with the status the SDK maps (401 AuthenticationError, 502 sandbox gone). */
function sendEnvdError(res: ServerResponse, err: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const status = isSbxError(err) ? (HTTP_STATUS[err.code] ?? 500) : 500;
  const retryAfter = retryAfterSeconds(err);
  res.writeHead(status, { 'content-type': 'application/json', ...(retryAfter ? { 'retry-after': retryAfter } : {}), ...headers });
  res.end(JSON.stringify({ code: status, message: err instanceof Error ? err.message : String(err) }));
}

/** What a refused request's body may still send before its connection is cut, and how long it may take. */
const REFUSED_BODY_MAX_BYTES = 64 * 1024;
const REFUSED_BODY_MAX_MS = 5_000;

/**
 * The error of a request refused before its body is read (failed authentication, a sandbox that is
 * gone). The body already sent (a Connect message, a small upload) is read and dropped, up to
 * REFUSED_BODY_MAX_BYTES within REFUSED_BODY_MAX_MS, and the connection kept: closing one with
 * bytes still arriving resets it, and the client can lose the answer. Past either the connection
 * is cut, so a client cannot keep the server reading (or holding) an unauthenticated upload.
 */
function refuse(req: IncomingMessage, res: ServerResponse, err: unknown): void {
  if (!req.complete) {
    let dropped = 0;
    // A body trickled in slowly would keep the connection (and a file descriptor) forever.
    const cut = setTimeout(() => req.destroy(), REFUSED_BODY_MAX_MS).unref();
    req.on('data', (chunk: Buffer) => {
      dropped += chunk.length;
      if (dropped > REFUSED_BODY_MAX_BYTES) req.destroy();
    });
    req.on('close', () => clearTimeout(cut));
    req.on('error', () => undefined);
    req.resume();
  }
  sendEnvdError(res, err);
}
