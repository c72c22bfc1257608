/**
 * File transfers with progress. Uploads go through XMLHttpRequest, the one browser API that
 * reports upload progress (fetch does not); it carries the session token itself, as api.ts
 * `request()` does for fetch. Downloads read the fetch body as it arrives, against its
 * Content-Length or, for a box file (streamed, no length), the size the listing gave.
 */
import { ApiError, SESSION_HEADER, request, sessionToken } from '../api';

/** How far a transfer is: `total` undefined while it is not known. */
export type Progress = (loaded: number, total: number | undefined) => void;

/** The API's error in an XHR's answer, as api.ts makes it of a fetch's. */
function errorOfXhr(xhr: XMLHttpRequest): ApiError {
  const text = typeof xhr.responseText === 'string' ? xhr.responseText : '';
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string; details?: Record<string, unknown> } };
    if (body.error?.message) return new ApiError(xhr.status, body.error.code ?? 'internal', body.error.message, body.error.details);
  } catch {
    // not JSON
  }
  return new ApiError(xhr.status, 'internal', `HTTP ${xhr.status}${text ? `: ${text.slice(0, 200)}` : ''}`);
}

/** PUTs `body` to `path` under the session, reporting the bytes sent. Rejects with the API's error. */
export function upload(path: string, body: Blob, onProgress: Progress, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', path);
    const token = sessionToken();
    if (token) xhr.setRequestHeader(SESSION_HEADER, token);
    xhr.setRequestHeader('Content-Type', 'application/octet-stream');
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : body.size);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress(body.size, body.size);
        resolve();
        return;
      }
      // A session that ended: let api.ts notice it (it forgets the token and shows the sign-in).
      if (xhr.status === 401) void request('/v1/whoami').catch(() => undefined);
      reject(errorOfXhr(xhr));
    };
    xhr.onerror = () => reject(new Error(`the upload to ${path} failed: the connection was lost`));
    xhr.onabort = () => reject(new Error('the upload was cancelled'));
    signal?.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(body);
  });
}

/** GETs `path` under the session into a Blob, reporting the bytes received. */
export async function download(path: string, sizeHint: number | undefined, onProgress: Progress, signal?: AbortSignal): Promise<Blob> {
  const res = await request(path, signal ? { signal } : {});
  const length = Number(res.headers.get('content-length') ?? NaN);
  const total = Number.isFinite(length) ? length : sizeHint;
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  onProgress(0, total);
  if (res.body) {
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      loaded += value.byteLength;
      onProgress(loaded, total);
    }
  }
  return new Blob(chunks as BlobPart[], { type: 'application/octet-stream' });
}

/** Hands a Blob to the browser as a download named `name`. */
export function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.rel = 'noopener';
  document.body.appendChild(a);
  a.click();
  a.remove();
  // The download has its own reference once started; free ours after this turn.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** `path` as UTF-8 text when it is at most `limit` bytes and valid UTF-8; else how large it is, or that it is not text. */
export async function readText(path: string, limit: number, signal?: AbortSignal): Promise<{ text: string } | { tooLarge: number } | { binary: true }> {
  const ctl = new AbortController();
  signal?.addEventListener('abort', () => ctl.abort(), { once: true });
  const res = await request(path, { signal: ctl.signal });
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  const reader = res.body?.getReader();
  while (reader) {
    const { done, value } = await reader.read();
    if (done) break;
    loaded += value.byteLength;
    if (loaded > limit) {
      ctl.abort();
      return { tooLarge: loaded };
    }
    chunks.push(value);
  }
  const all = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  try {
    return { text: new TextDecoder('utf-8', { fatal: true }).decode(all) };
  } catch {
    return { binary: true };
  }
}
