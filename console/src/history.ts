/**
 * The exec history of this console session, per box: what the console ran (the run form) and the
 * terminals it opened, newest first. Kept in the page's memory only, never sent anywhere and never
 * in storage: a box's page opened in this tab (the path-based proxy shares this origin) would read
 * the tab's storage, and a command line may hold a secret. A reload starts it afresh.
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
const histories = new Map<string, ExecRecord[]>();

export function execHistory(boxId: string): ExecRecord[] {
  return histories.get(boxId) ?? [];
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
  histories.set(boxId, list.slice(0, MAX));
  dispatchEvent(new CustomEvent('sbx-history', { detail: boxId }));
}
