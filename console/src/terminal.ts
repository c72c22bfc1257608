/**
 * One terminal of a box: xterm.js on a PTY through the exec WebSocket (`GET /v1/boxes/:id/exec/ws`,
 * src/server/ws-exec.ts). Frames are binary, first byte the channel: 0 stdin, 1 stdout, 2 stderr,
 * 3 control (JSON: `{"exit":N}`, `{"error":{…}}`, and from here `{"resize":{cols,rows}}`).
 *
 * xterm and its fit addon are imported when the first terminal opens, so esbuild puts them (and
 * their CSS) in a chunk of their own and the console's first load stays small.
 */
import { ApiError, request, webSocketOf } from './api';

/** bash when the image has it, else the POSIX shell; a login shell either way (the image's profile). */
export const SHELL_CMD = ['sh', '-c', 'command -v bash >/dev/null && exec bash -l || exec sh -l'];
export const SHELL_LINE = `sh -c '${SHELL_CMD[2]!}'`;

const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, control: 3 } as const;

export type TerminalState =
  | { kind: 'connecting' }
  | { kind: 'open' }
  /** The shell ended with this code. */
  | { kind: 'exited'; exitCode: number }
  /** The socket closed without an exit code (the server went away, or this tab closed it). */
  | { kind: 'closed'; reason: string }
  /** Refused before it opened, or the server said why it ended. */
  | { kind: 'error'; error: unknown };

export interface TerminalHandle {
  /** Closes the socket (the shell is killed in the box) and removes the terminal. */
  dispose(): void;
  focus(): void;
  /** Fits the terminal to its element again (after it was hidden). */
  fit(): void;
}

export interface TerminalOptions {
  boxId: string;
  onState(state: TerminalState): void;
  /** The socket opened: the shell runs. */
  onOpen?(): void;
}

const encoder = new TextEncoder();

function frame(channel: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(body.length + 1);
  out[0] = channel;
  out.set(body, 1);
  return out;
}

/** The exec WebSocket's path for a shell of `cols`×`rows`. */
export function shellPath(boxId: string, cols: number, rows: number): string {
  const q = new URLSearchParams();
  for (const part of SHELL_CMD) q.append('cmd', part);
  q.set('tty', 'true');
  q.set('cols', String(cols));
  q.set('rows', String(rows));
  q.append('env', 'TERM=xterm-256color');
  return `/v1/boxes/${encodeURIComponent(boxId)}/exec/ws?${q.toString()}`;
}

/**
 * Why a socket to `path` was refused: a browser's WebSocket shows no HTTP answer, so the same
 * path is asked again as a plain GET, which the route answers with the API's error (the checks run
 * before the upgrade) or, when they pass, 404 (no socket asked for).
 */
async function refusalOf(path: string): Promise<unknown> {
  try {
    await request(path);
  } catch (err) {
    // A 404 without the API's error body is the route's answer to a GET that is not an upgrade.
    if (err instanceof ApiError && !(err.status === 404 && err.code === 'internal')) return err;
  }
  return new Error('the terminal connection was refused or dropped before it opened');
}

export async function openTerminal(host: HTMLElement, opts: TerminalOptions): Promise<TerminalHandle> {
  const { Terminal, FitAddon } = await import('./terminal-xterm');
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: "ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace",
    fontSize: 13,
    scrollback: 5000,
    theme: { background: '#000000' },
    // A program in the box may print hyperlinks (OSC 8). xterm's own handler opens them with an
    // opener, and a box page on this origin opened that way could reach this page: never.
    linkHandler: {
      activate: (_event, uri) => {
        window.open(uri, '_blank', 'noopener,noreferrer');
      },
    },
  });
  const fitter = new FitAddon();
  term.loadAddon(fitter);
  term.open(host);
  const fit = (): void => {
    // A hidden terminal (another tab) has no size: fitting it would make it 1 column wide.
    if (host.offsetWidth > 0 && host.offsetHeight > 0) fitter.fit();
  };
  fit();

  const path = shellPath(opts.boxId, term.cols, term.rows);
  const { url, protocols } = webSocketOf(path);
  const ws = new WebSocket(url, protocols);
  ws.binaryType = 'arraybuffer';
  let opened = false;
  let ended = false;
  let disposed = false;
  opts.onState({ kind: 'connecting' });

  const send = (channel: number, body: Uint8Array): void => {
    if (ws.readyState === WebSocket.OPEN) ws.send(frame(channel, body));
  };
  const control = (msg: unknown): void => send(CHANNEL.control, encoder.encode(JSON.stringify(msg)));
  const end = (state: TerminalState): void => {
    if (ended) return;
    ended = true;
    if (!disposed) opts.onState(state);
  };

  ws.onopen = () => {
    opened = true;
    opts.onState({ kind: 'open' });
    opts.onOpen?.();
    // The size may have changed while the socket was opening.
    control({ resize: { cols: term.cols, rows: term.rows } });
  };
  ws.onmessage = (ev: MessageEvent<ArrayBuffer>) => {
    const data = new Uint8Array(ev.data);
    const channel = data[0];
    if (channel === CHANNEL.stdout || channel === CHANNEL.stderr) {
      term.write(data.subarray(1));
    } else if (channel === CHANNEL.control) {
      let msg: { exit?: number; error?: { code?: string; message?: string } };
      try {
        msg = JSON.parse(new TextDecoder().decode(data.subarray(1))) as typeof msg;
      } catch {
        return;
      }
      if (typeof msg.exit === 'number') end({ kind: 'exited', exitCode: msg.exit });
      else if (msg.error?.message) end({ kind: 'error', error: new ApiError(0, msg.error.code ?? 'internal', msg.error.message) });
    }
  };
  ws.onclose = (ev: CloseEvent) => {
    if (ended || disposed) return;
    if (!opened) {
      void refusalOf(path).then((error) => end({ kind: 'error', error }));
      return;
    }
    end({ kind: 'closed', reason: ev.reason || `connection closed (${ev.code})` });
  };

  const onData = term.onData((d) => send(CHANNEL.stdin, encoder.encode(d)));
  // Binary input (some mouse reports) is bytes 0-255 in a string.
  const onBinary = term.onBinary((d) =>
    send(
      CHANNEL.stdin,
      Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff),
    ),
  );
  const onResize = term.onResize(({ cols, rows }) => control({ resize: { cols, rows } }));
  const observer = new ResizeObserver(() => fit());
  observer.observe(host);

  return {
    dispose() {
      disposed = true;
      observer.disconnect();
      onData.dispose();
      onBinary.dispose();
      onResize.dispose();
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, 'closed');
      term.dispose();
    },
    focus: () => term.focus(),
    fit,
  };
}
