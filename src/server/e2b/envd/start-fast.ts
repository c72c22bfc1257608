/**
 * `process.Process/Start` (the SDK's `commands.run`, the e2b path's hot RPC) served straight on
 * Node's request and response, without @connectrpc's handler pipeline: that pipeline passes every
 * message through a stack of async-iterable transforms (split, parse, invoke, serialize, compress,
 * join) and cost the server more CPU per command than running the command in the box did. This
 * is the Connect protocol's server-streaming call over HTTP/1.1 as @connectrpc answers it: the
 * one request message in an envelope, 200 with `application/connect+json` (or `+proto`), an
 * envelope per StartResponse, then the end-stream envelope (`{}`, or `{"error": …}`), errors
 * included (a streaming call reports them in its end-stream message, not in the status).
 *
 * Only the plain form is taken here (see `servesStart`): a compressed request body goes to
 * @connectrpc's handler. Responses are never compressed, which the protocol allows whatever the
 * client accepts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { create, fromBinary, fromJsonString, toBinary, toJsonString, type MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError, createHandlerContext, type ContextValues, type HandlerContext } from '@connectrpc/connect';
import {
  contentTypeStreamJson,
  contentTypeStreamProto,
  createEndStreamSerialization,
  endStreamFlag,
  parseContentType,
  parseTimeout,
} from '@connectrpc/connect/protocol-connect';
import { Process, StartRequestSchema, StartResponseSchema, type StartRequest } from './gen/process/process_pb.js';

/** The path of Start under the envd prefix. */
export const START_PATH = `/${Process.typeName}/${Process.method.start.name}`;

export type StartImpl = (req: StartRequest, ctx: HandlerContext) => AsyncIterable<MessageInitShape<typeof StartResponseSchema>>;

const endStream = createEndStreamSerialization({});
const ENVELOPE_HEADER_BYTES = 5;
const COMPRESSED_FLAG = 0b00000001;

/** Whether this request is a Start this module serves: POST, a Connect stream content type, an uncompressed body. */
export function servesStart(req: IncomingMessage, path: string): boolean {
  if (path !== START_PATH || req.method !== 'POST') return false;
  if (!parseContentType(req.headers['content-type'] ?? null)?.stream) return false;
  const encoding = req.headers['connect-content-encoding'];
  return encoding === undefined || encoding === 'identity';
}

/**
 * The request body. A message longer than `max` (as @connectrpc's readMaxBytes) is refused as
 * soon as its envelope's length header says so, before its bytes are awaited.
 */
async function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  let checked = false;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    chunks.push(chunk as Buffer);
    if (!checked && size >= ENVELOPE_HEADER_BYTES) {
      checked = true;
      const length = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).readUInt32BE(1);
      if (length > max) throw new ConnectError(`message size ${length} is larger than configured readMaxBytes ${max}`, Code.ResourceExhausted);
    }
    if (size > max + ENVELOPE_HEADER_BYTES) throw new ConnectError(`message size is larger than configured readMaxBytes ${max}`, Code.ResourceExhausted);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

/** The one message of a server-streaming request's body. */
function parseInput(body: Buffer, binary: boolean): StartRequest {
  if (body.length < ENVELOPE_HEADER_BYTES) throw new ConnectError('protocol error: missing input message for server-streaming method', Code.InvalidArgument);
  const flags = body[0]!;
  const length = body.readUInt32BE(1);
  // The same words as @connectrpc's for each fault: a body cut inside its envelope, or more than one message.
  if (body.length < ENVELOPE_HEADER_BYTES + length) throw new ConnectError('protocol error: incomplete envelope', Code.InvalidArgument);
  if (body.length > ENVELOPE_HEADER_BYTES + length)
    throw new ConnectError('protocol error: expected one input message for server-streaming method', Code.InvalidArgument);
  if (flags & COMPRESSED_FLAG) throw new ConnectError('protocol error: received compressed envelope, but no connect-content-encoding', Code.Internal);
  if (flags & endStreamFlag) throw new ConnectError('protocol error: received end-stream envelope as the input message', Code.InvalidArgument);
  const data = body.subarray(ENVELOPE_HEADER_BYTES);
  try {
    return binary ? fromBinary(StartRequestSchema, data) : fromJsonString(StartRequestSchema, data.toString('utf8'), { ignoreUnknownFields: true });
  } catch (err) {
    throw ConnectError.from(err, Code.InvalidArgument);
  }
}

function envelope(flags: number, data: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(ENVELOPE_HEADER_BYTES + data.length);
  out[0] = flags;
  out.writeUInt32BE(data.length, 1);
  out.set(data, ENVELOPE_HEADER_BYTES);
  return out;
}

/** The request's headers as a record (createHandlerContext makes its Headers of it: one copy, not two). */
function requestHeaders(req: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (typeof value === 'string') headers[name] = value;
    else if (Array.isArray(value)) headers[name] = value.join(', ');
  }
  return headers;
}

/** Until `res` can take more (false: it closed first). */
function drained(res: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => () => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = done(true);
    const onClose = done(false);
    res.once('drain', onDrain);
    res.once('close', onClose);
  });
}

/** Serves one Start request on `res` with the service's `start`. Never throws: errors end the stream. */
export async function serveStart(
  req: IncomingMessage,
  res: ServerResponse,
  start: StartImpl,
  opts: { contextValues: ContextValues; readMaxBytes: number; maxTimeoutMs: number },
): Promise<void> {
  const binary = parseContentType(req.headers['content-type'] ?? null)?.binary === true;
  const timeoutHeader = req.headers['connect-timeout-ms'];
  const timeout = parseTimeout(typeof timeoutHeader === 'string' ? timeoutHeader : null, opts.maxTimeoutMs);
  const gone = new AbortController();
  const onClose = (): void => gone.abort(new ConnectError('the client closed the connection', Code.Canceled));
  res.once('close', onClose);
  const ctx = createHandlerContext({
    service: Process,
    method: Process.method.start,
    protocolName: 'connect',
    requestMethod: 'POST',
    url: `http://${req.headers.host ?? 'envd'}${req.url ?? ''}`,
    requestHeader: requestHeaders(req),
    responseHeader: { 'content-type': binary ? contentTypeStreamProto : contentTypeStreamJson },
    requestSignal: gone.signal,
    ...(timeout.timeoutMs !== undefined ? { timeoutMs: timeout.timeoutMs } : {}),
    contextValues: opts.contextValues,
  });
  const send = async (flags: number, data: Uint8Array): Promise<boolean> => {
    if (res.destroyed) return false;
    if (!res.headersSent) res.writeHead(200, Object.fromEntries(ctx.responseHeader));
    return res.write(envelope(flags, data)) || drained(res);
  };
  let error: ConnectError | undefined;
  try {
    if (timeout.error) throw timeout.error;
    const input = parseInput(await readBody(req, opts.readMaxBytes), binary);
    for await (const out of start(input, ctx)) {
      const msg = create(StartResponseSchema, out);
      const data = binary ? toBinary(StartResponseSchema, msg) : Buffer.from(toJsonString(StartResponseSchema, msg));
      if (!(await send(0, data))) break;
    }
  } catch (err) {
    error = err instanceof ConnectError ? err : new ConnectError('internal error', Code.Internal, undefined, undefined, err);
  } finally {
    ctx.abort();
  }
  res.off('close', onClose);
  if (res.destroyed) return;
  await send(endStreamFlag, endStream.serialize({ metadata: ctx.responseTrailer, ...(error ? { error } : {}) }));
  res.end();
}
