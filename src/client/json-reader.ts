/**
 * Reads a JSON body as it arrives without ever holding its text whole: string values are
 * decoded a piece at a time, and the long ones are kept aside while the rest (short strings,
 * numbers, the structure) is parsed at the end. A buffered exec's answer can be far longer than
 * V8's longest string (2^29 - 24 characters): its output is escaped, a NUL byte as six
 * characters (`\u0000`), so 100 MB of NULs is 600 MB of JSON, yet the decoded output fits.
 */
import { randomBytes } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';

/** Strings at least this long are kept aside instead of going back into the skeleton. */
const ASIDE_CHARS = 1024;

export class JsonReader {
  private readonly decoder = new StringDecoder('utf8');
  /** The document with every long string value replaced by a placeholder (keys stay as they are). */
  private skeleton = '';
  private readonly aside: string[] = [];
  /** Unique to this reader, so no string of the document can pass for a placeholder. */
  private readonly mark = `\uE000${randomBytes(8).toString('hex')}:`;
  private inString = false;
  /** Whether the string being read is an object's key: keys are never put aside (the reviver restores values only). */
  private inKey = false;
  private value = '';
  /** The open containers outside strings, innermost last: `{` or `[`. */
  private readonly open: string[] = [];
  /** The last character outside strings that is not whitespace (`"` after a string). */
  private last = '';
  /** The end of the last piece inside a string when it stopped within an escape. */
  private carry = '';

  write(chunk: Buffer): void {
    this.feed(this.decoder.write(chunk));
  }

  /** The parsed document; throws a SyntaxError for a malformed one. */
  end(): unknown {
    this.feed(this.decoder.end());
    if (this.inString) throw new SyntaxError('unterminated string in JSON');
    const { aside, mark } = this;
    return JSON.parse(this.skeleton, (_key, v: unknown) => (typeof v === 'string' && v.startsWith(mark) ? aside[Number(v.slice(mark.length))] : v));
  }

  private feed(text: string): void {
    let t = this.carry + text;
    this.carry = '';
    let i = 0;
    while (i < t.length) {
      if (!this.inString) {
        const q = t.indexOf('"', i);
        if (q === -1) {
          this.structure(t.slice(i));
          return;
        }
        this.structure(t.slice(i, q));
        this.inString = true;
        // A string right after `{`, or after `,` within an object, is a key.
        this.inKey = this.open.at(-1) === '{' && (this.last === '{' || this.last === ',');
        this.last = '"';
        this.value = '';
        i = q + 1;
        continue;
      }
      const close = closingQuote(t, i);
      if (close === -1) {
        const cut = safeEnd(t, i);
        this.take(t.slice(i, cut));
        this.carry = t.slice(cut);
        return;
      }
      this.take(t.slice(i, close));
      this.finishString();
      i = close + 1;
      // Drop what was read, so a long document does not keep its text in `t`.
      if (i > 1 << 16) {
        t = t.slice(i);
        i = 0;
      }
    }
  }

  /** Text outside strings: into the skeleton, following which container a string is in. */
  private structure(text: string): void {
    this.skeleton += text;
    for (const c of text) {
      if (c === '{' || c === '[') this.open.push(c);
      else if (c === '}' || c === ']') this.open.pop();
      if (c !== ' ' && c !== '\t' && c !== '\n' && c !== '\r') this.last = c;
    }
  }

  /** Decodes a piece of a string's body that ends at an escape boundary. */
  private take(raw: string): void {
    if (raw) this.value += JSON.parse(`"${raw}"`) as string;
  }

  private finishString(): void {
    this.inString = false;
    if (this.inKey || this.value.length < ASIDE_CHARS) {
      this.skeleton += JSON.stringify(this.value);
    } else {
      this.skeleton += JSON.stringify(this.mark + this.aside.length);
      this.aside.push(this.value);
    }
    this.value = '';
  }
}

/** How many backslashes end just before `at`, counting no further back than `from`. */
function backslashesBefore(t: string, at: number, from: number): number {
  let n = 0;
  while (at - n - 1 >= from && t.charCodeAt(at - n - 1) === 0x5c) n++;
  return n;
}

/** The quote that ends a string whose body starts at `from` (an escape boundary), or -1. */
function closingQuote(t: string, from: number): number {
  for (let q = t.indexOf('"', from); q !== -1; q = t.indexOf('"', q + 1)) {
    if (backslashesBefore(t, q, from) % 2 === 0) return q;
  }
  return -1;
}

/** Where the text can be cut without splitting an escape (`\` and its character, or `\uXXXX`). */
function safeEnd(t: string, from: number): number {
  const end = t.length;
  if (backslashesBefore(t, end, from) % 2 === 1) return end - 1;
  // An escape that started within the last five characters may still be missing hex digits.
  for (let k = Math.max(from, end - 5); k < end - 1; k++) {
    if (t.charCodeAt(k) === 0x5c && t.charCodeAt(k + 1) === 0x75 && backslashesBefore(t, k, from) % 2 === 0 && end - k < 6) return k;
  }
  return end;
}
