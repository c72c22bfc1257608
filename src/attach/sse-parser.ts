/**
 * The event-stream parser of the HTML spec ("9.2.6 Interpreting an event stream"): UTF-8 with
 * an optional BOM, lines ended by CRLF, LF or CR (a CRLF split across chunks is one line end),
 * `:` comments, `field: value` with one leading space dropped, `data` lines joined by `\n`,
 * `event`, `id` (kept across events, ignored when it contains NUL), `retry` (digits only), an
 * empty line dispatching, and an unfinished event at the end discarded.
 */
import type { SseEvent } from './types.js';

export class SseParser {
  private readonly decoder = new TextDecoder('utf-8');
  private line = '';
  private afterCr = false;
  private atStart = true;
  private data = '';
  private hasData = false;
  private type = '';
  private lastId = '';
  private retry: number | undefined;

  /** Feeds one chunk; returns the events it completed, in order. */
  push(chunk: Uint8Array | string): SseEvent[] {
    let text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    // The decoder drops a leading BOM of bytes; text handed in as a string gets the same.
    if (this.atStart && text !== '') {
      this.atStart = false;
      if (typeof chunk === 'string' && text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    return this.feed(text);
  }

  /** The end of the stream: what is left undispatched is discarded (per the spec). */
  end(): SseEvent[] {
    this.feed(this.decoder.decode());
    this.line = '';
    this.resetEvent();
    return [];
  }

  private feed(text: string): SseEvent[] {
    const out: SseEvent[] = [];
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      if (c === 10 && this.afterCr && i === start && this.line === '') {
        // The LF of a CRLF whose CR ended the previous line (possibly in the previous chunk).
        this.afterCr = false;
        start = i + 1;
        continue;
      }
      this.line += text.slice(start, i);
      start = i + 1;
      this.afterCr = c === 13;
      const ev = this.processLine(this.line);
      this.line = '';
      if (ev) out.push(ev);
    }
    if (start < text.length) {
      this.line += text.slice(start);
      this.afterCr = false;
    }
    return out;
  }

  private processLine(line: string): SseEvent | undefined {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data += value + '\n';
        this.hasData = true;
        break;
      case 'event':
        this.type = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      case 'retry':
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break;
    }
    return undefined;
  }

  private dispatch(): SseEvent | undefined {
    if (!this.hasData) {
      this.resetEvent();
      return undefined;
    }
    const ev: SseEvent = { event: this.type || 'message', data: this.data.slice(0, -1) };
    if (this.lastId !== '') ev.id = this.lastId;
    if (this.retry !== undefined) ev.retry = this.retry;
    this.resetEvent();
    return ev;
  }

  private resetEvent(): void {
    this.data = '';
    this.hasData = false;
    this.type = '';
    this.retry = undefined;
  }
}
