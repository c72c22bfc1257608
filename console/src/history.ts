/**
 * The exec history of this browser session, per box: what the console ran (the run form) and the
 * terminals it opened, newest first. Kept in this tab's sessionStorage, so it lasts as long as the
 * session and is never sent anywhere.
 */
export interface ExecRecord {
  /** ISO time it started. */
  at: string;
  kind: 'run' | 'terminal';
  /** The command line as typed (a terminal: its shell). */
  cmd: string;
  /** When it ended: its exit code (null: ended without one, e.g. closed). */
  exitCode?: number | null;
  durationMs?: number;
}

const MAX = 100;
const keyOf = (boxId: string): string => `sbx.history.${boxId}`;

export function execHistory(boxId: string): ExecRecord[] {
  try {
    const list = JSON.parse(sessionStorage.getItem(keyOf(boxId)) ?? '[]') as unknown;
    return Array.isArray(list) ? (list as ExecRecord[]) : [];
  } catch {
    return [];
  }
}

/** Adds a record; returns a function that completes it (exit code, duration). */
export function recordExec(boxId: string, rec: Omit<ExecRecord, 'at'>): (end: { exitCode: number | null }) => void {
  const at = new Date().toISOString();
  const started = performance.now();
  save(boxId, [{ ...rec, at }, ...execHistory(boxId)]);
  return (end) =>
    save(
      boxId,
      execHistory(boxId).map((r) =>
        r.at === at && r.cmd === rec.cmd ? { ...r, exitCode: end.exitCode, durationMs: Math.round(performance.now() - started) } : r,
      ),
    );
}

function save(boxId: string, list: ExecRecord[]): void {
  sessionStorage.setItem(keyOf(boxId), JSON.stringify(list.slice(0, MAX)));
  dispatchEvent(new CustomEvent('sbx-history', { detail: boxId }));
}
