/**
 * `sbx images pull` output as `docker pull` shows it: on a terminal a line per layer with a bar
 * and a total under them, redrawn in place; elsewhere one plain line per change of a layer's
 * status (not per byte), so logs stay readable.
 */
import type { PullProgress } from '../client/index.js';
import { SbxError } from '../errors.js';
import { formatBytes } from './output.js';

interface Layer {
  id: string;
  status: string;
  current?: number;
  total?: number;
  /** Download size, kept once the layer moves on to extracting. */
  size?: number;
  downloaded: boolean;
  done: boolean;
}

const DOWNLOADED = /^(Verifying Checksum|Download complete|Extracting|Pull complete)$/;
const DONE = /^(Pull complete|Already exists)$/;
const BAR = 30;

export interface Sink {
  write(text: string): unknown;
  isTTY?: boolean;
}

export function bar(current: number, total: number, width = BAR): string {
  const filled = total > 0 ? Math.min(width, Math.round((current / total) * width)) : 0;
  return '[' + '='.repeat(Math.max(0, filled - 1)) + (filled > 0 ? (filled === width ? '=' : '>') : '') + ' '.repeat(width - filled) + ']';
}

export class PullRenderer {
  private readonly layers = new Map<string, Layer>();
  private drawnLines = 0;
  private lastDraw = 0;
  private pending: ReturnType<typeof setTimeout> | undefined;
  private readonly tty: boolean;

  constructor(
    private readonly out: Sink,
    private readonly ref: string,
    opts: { tty?: boolean; intervalMs?: number } = {},
  ) {
    this.tty = opts.tty ?? out.isTTY === true;
    this.intervalMs = opts.intervalMs ?? 80;
  }

  private readonly intervalMs: number;

  update(ev: PullProgress): void {
    // "Pulling from repo" carries the tag as its id: it is a heading, not a layer.
    const isLayer = ev.id !== undefined && !/^Pulling from /.test(ev.status);
    if (!isLayer) return this.note(ev.id && !/^Pulling from /.test(ev.status) ? `${ev.id}: ${ev.status}` : ev.status);
    const id = ev.id!;
    let layer = this.layers.get(id);
    const changed = !layer || layer.status !== ev.status;
    if (!layer) {
      layer = { id, status: ev.status, downloaded: false, done: false };
      this.layers.set(id, layer);
    }
    layer.status = ev.status;
    layer.current = ev.current;
    layer.total = ev.total;
    if (ev.status === 'Downloading' && ev.total) layer.size = ev.total;
    if (DOWNLOADED.test(ev.status)) layer.downloaded = true;
    if (DONE.test(ev.status)) layer.done = true;
    if (this.tty) this.schedule();
    else if (changed) this.out.write(`${id}: ${ev.status}\n`);
  }

  /** Downloaded bytes of the layers whose size is known, and that size. */
  totals(): { current: number; total: number; layers: number; done: number } {
    let current = 0;
    let total = 0;
    let done = 0;
    for (const l of this.layers.values()) {
      if (l.done) done++;
      if (l.size === undefined) continue;
      total += l.size;
      current += l.downloaded ? l.size : l.status === 'Downloading' ? (l.current ?? 0) : 0;
    }
    return { current, total, layers: this.layers.size, done };
  }

  private note(text: string): void {
    if (!this.tty) {
      this.out.write(text + '\n');
      return;
    }
    // Printed where the layer block was, and the block drawn again below it.
    this.draw([text]);
  }

  private schedule(): void {
    const wait = this.intervalMs - (Date.now() - this.lastDraw);
    if (wait <= 0) return this.draw();
    this.pending ??= setTimeout(() => {
      this.pending = undefined;
      this.draw();
    }, wait);
  }

  private line(l: Layer): string {
    const status = l.status.padEnd(18);
    if ((l.status === 'Downloading' || l.status === 'Extracting') && l.total) {
      return `${l.id}: ${status} ${bar(l.current ?? 0, l.total)} ${formatBytes(l.current ?? 0)}/${formatBytes(l.total)}`;
    }
    return `${l.id}: ${l.status}`;
  }

  private block(): string[] {
    if (this.layers.size === 0) return [];
    const t = this.totals();
    const sizes = t.total > 0 ? ` ${bar(t.current, t.total)} ${formatBytes(t.current)}/${formatBytes(t.total)}` : '';
    return [...[...this.layers.values()].map((l) => this.line(l)), `Total: ${t.done}/${t.layers} layers${sizes}`];
  }

  private draw(notes: string[] = []): void {
    this.lastDraw = Date.now();
    let text = this.drawnLines > 0 ? `\x1b[${this.drawnLines}A` : '';
    const lines = [...notes, ...this.block()];
    for (const l of lines) text += `\x1b[2K${l}\n`;
    this.drawnLines = lines.length - notes.length;
    this.out.write(text);
  }

  /** The last state drawn (on a terminal) or a closing line (elsewhere). */
  finish(): void {
    clearTimeout(this.pending);
    this.pending = undefined;
    if (this.tty) this.draw();
    else if (this.layers.size > 0) {
      const t = this.totals();
      this.out.write(`${this.ref}: ${t.done}/${t.layers} layers${t.total ? `, ${formatBytes(t.total)} downloaded` : ''}\n`);
    }
  }
}

/** `--pull`, as docker run and docker create take it. */
export const PULL_POLICIES = ['missing', 'always', 'never'] as const;
export type PullPolicy = (typeof PULL_POLICIES)[number];

/**
 * Makes a box from `image` under a pull policy (docker's): `missing` pulls when the create says
 * the pool lacks the image, then creates again; `always` pulls first; `never` only creates.
 * Progress goes to stderr, so stdout keeps only what the command prints (a box id).
 */
export async function createPulling<T>(image: string, policy: PullPolicy, create: () => Promise<T>, pull: () => AsyncIterable<PullProgress>): Promise<T> {
  const pullNow = async () => {
    const renderer = new PullRenderer(process.stderr, image);
    try {
      for await (const ev of pull()) renderer.update(ev);
    } finally {
      renderer.finish();
    }
  };
  if (policy === 'always') await pullNow();
  try {
    return await create();
  } catch (err) {
    const missing = err instanceof SbxError && err.code === 'not_found' && err.details?.['image'] === image;
    if (policy !== 'missing' || !missing) throw err;
    process.stderr.write(`sbx: image ${image} is not on the pool; pulling it (--pull never would not)\n`);
  }
  try {
    await pullNow();
  } catch (err) {
    if (err instanceof SbxError && err.code === 'forbidden')
      throw new SbxError(
        'not_found',
        `image ${image} is not on the pool, and only an admin key may pull one: ask an admin to run \`sbx images pull ${image}\``,
        {
          details: { image },
        },
      );
    throw err;
  }
  return create();
}
