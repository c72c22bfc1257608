/**
 * Names of sbx's temporary entries: temp files beside a write target, staged trees, workspaces
 * being built. Each name says who made it — the pid namespace, pid and start time of the writing
 * process — so a sweep after a crash can tell a dead writer's leftovers from the live work of
 * another process sharing the data directory, with no lock, no clock and no age guess:
 *
 *   .sbx-tmp-<pid namespace inode>-<pid>-<start time in clock ticks since boot>-<16 hex>
 *
 * The start time makes a recycled pid harmless (same pid, other start: the writer is gone). A
 * name from another pid namespace cannot be judged from here and is never swept.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { errnoOf } from './fs-errors.js';

/** What every temporary entry's name starts with. */
export const TEMP_PREFIX = '.sbx-tmp-';
const TEMP_NAME = /^\.sbx-tmp-(\d{1,20})-(\d{1,10})-(\d{1,20})-[0-9a-f]{16}$/;
/** Linux's pid_max can be at most 2^22. */
const MAX_PID = 4_194_304;

/**
 * The process a temp name says made it.
 *
 * @example
 * parseTempName(tempName()); // { namespace: '4026531836', pid: 4242, start: '912345' }
 */
export interface Writer {
  namespace: string;
  pid: number;
  start: string;
}

let self: { tag: string; namespace: string } | null | undefined;

/** This process's `<namespace>-<pid>-<start>`, read once; null where /proc cannot tell. */
function selfWriter(): { tag: string; namespace: string } | null {
  if (self === undefined) {
    try {
      const namespace = pidNamespace(readlinkSync('/proc/self/ns/pid'));
      const start = startTimeOf(readFileSync('/proc/self/stat', 'utf8'))?.start;
      self = namespace && start ? { tag: `${namespace}-${process.pid}-${start}`, namespace } : null;
    } catch {
      self = null;
    }
  }
  return self;
}

/**
 * A fresh temp name carrying this process as its writer. It starts with a dot and says what it
 * is, since a box can see a temp file beside its target for a moment. Where /proc cannot name the
 * writer, the name carries none and no sweep ever removes it.
 *
 * @example
 * tempName(); // '.sbx-tmp-4026531836-4242-912345-3f9c0a1b2c3d4e5f'
 */
export function tempName(): string {
  const writer = selfWriter();
  return `${TEMP_PREFIX}${writer ? writer.tag : 'unknown'}-${randomBytes(8).toString('hex')}`;
}

/**
 * The writer a temp name names, or undefined for any other name (a box's own `.sbx-tmp-notes`
 * included).
 *
 * @example
 * parseTempName('.sbx-tmp-4026531836-4242-912345-3f9c0a1b2c3d4e5f')?.pid; // 4242
 */
export function parseTempName(name: string): Writer | undefined {
  const match = TEMP_NAME.exec(name);
  if (!match) return undefined;
  const pid = Number(match[2]);
  // pid 0 or beyond pid_max names no process (and kill(0, ...) would mean our own group).
  if (!Number.isSafeInteger(pid) || pid < 1 || pid > MAX_PID) return undefined;
  return { namespace: match[1] as string, pid, start: match[3] as string };
}

/**
 * Answers "has the process that made this temp entry certainly gone?", caching per writer for
 * one sweep. Anything it cannot tell (another pid namespace, a /proc it may not read) is "no".
 *
 * @example
 * const writers = new WriterCheck();
 * if (await writers.gone(name)) await dir.unlink(name);
 */
export class WriterCheck {
  private readonly answers = new Map<string, Promise<boolean>>();

  /** True only for a temp name whose writer has exited (or whose pid now belongs to another process). */
  gone(name: string): Promise<boolean> {
    const writer = parseTempName(name);
    if (!writer) return Promise.resolve(false);
    const key = `${writer.namespace}-${writer.pid}-${writer.start}`;
    let answer = this.answers.get(key);
    if (!answer) {
      answer = writerGone(writer);
      this.answers.set(key, answer);
    }
    return answer;
  }
}

async function writerGone(writer: Writer): Promise<boolean> {
  const mine = selfWriter();
  if (!mine || writer.namespace !== mine.namespace) return false;
  try {
    // Signal 0 checks existence; it also sees processes a hidepid /proc would hide.
    process.kill(writer.pid, 0);
  } catch (err) {
    if (errnoOf(err) === 'ESRCH') return true;
    if (errnoOf(err) !== 'EPERM') return false;
  }
  let stat: string;
  try {
    stat = await readFile(`/proc/${writer.pid}/stat`, 'utf8');
  } catch (err) {
    return errnoOf(err) === 'ENOENT' || errnoOf(err) === 'ESRCH'; // exited since the kill(0)
  }
  const now = startTimeOf(stat);
  if (!now) return false;
  // A zombie can write nothing more; another start time is another process under a recycled pid.
  return now.state === 'Z' || now.state === 'X' || now.start !== writer.start;
}

/** State and start time (field 22) of a /proc/<pid>/stat line; the name in parentheses may hold anything. */
function startTimeOf(stat: string): { state: string; start: string } | undefined {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  const start = fields[19];
  return state && start && /^\d+$/.test(start) ? { state, start } : undefined;
}

/** The inode of `pid:[4026531836]`. */
function pidNamespace(link: string): string | undefined {
  return /^pid:\[(\d+)\]$/.exec(link)?.[1];
}
