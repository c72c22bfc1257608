/**
 * The history tab: run a shell line in the box (POST /v1/boxes/:id/exec, `sh -c <line>`), see its
 * output and exit code, and this session's exec history of the box (history.ts: the run form's
 * commands and the terminals opened), kept fresh on its `sbx-history` event.
 */
import type { JSX } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api';
import { execHistory, recordExec } from '../history';
import type { ExecRecord } from '../history';
import type { BoxInfo } from '../types';
import { ErrorText, ago, duration, useAction } from '../ui';
import { boxPath } from './boxes';

interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  truncated: boolean;
  timedOut: boolean;
  durationMs: number;
}

const took = (ms: number): string => (ms < 1000 ? `${Math.round(ms)} ms` : duration(ms));

function useHistory(boxId: string): ExecRecord[] {
  const [list, setList] = useState(() => execHistory(boxId));
  useEffect(() => {
    const changed = (e: Event): void => {
      if ((e as CustomEvent<string>).detail === boxId) setList(execHistory(boxId));
    };
    setList(execHistory(boxId));
    addEventListener('sbx-history', changed);
    return () => removeEventListener('sbx-history', changed);
  }, [boxId]);
  return list;
}

export function HistoryTab({ box }: { box: BoxInfo }): JSX.Element {
  const [line, setLine] = useState('');
  const [result, setResult] = useState<{ cmd: string; res: ExecResult } | undefined>(undefined);
  const history = useHistory(box.id);
  const run = useAction(async (cmd: string) => {
    setResult(undefined);
    const end = recordExec(box.id, { kind: 'run', cmd });
    try {
      const res = await api<ExecResult>(boxPath(box.id, '/exec'), { method: 'POST', json: { cmd: ['sh', '-c', cmd] } });
      end({ exitCode: res.exitCode });
      setResult({ cmd, res });
    } catch (err) {
      end({ exitCode: null });
      throw err;
    }
  });

  return (
    <section class="box-run">
      <form
        class="run-form"
        data-testid="run-form"
        onSubmit={(e) => {
          e.preventDefault();
          if (line.trim()) run.run(line);
        }}
      >
        <label class="field grow">
          <span class="label">Run a command</span>
          <input
            class="mono"
            name="cmd"
            autocomplete="off"
            spellcheck={false}
            placeholder="ls -la /"
            value={line}
            onInput={(e) => setLine(e.currentTarget.value)}
          />
        </label>
        <button type="submit" class="primary" disabled={run.busy || line.trim() === ''}>
          {run.busy ? 'Running…' : 'Run'}
        </button>
      </form>
      <ErrorText error={run.error} />
      {result ? (
        <div class="run-result" data-testid="run-result">
          <p>
            <code>{result.cmd}</code> exited <strong data-testid="run-exit">{result.res.exitCode}</strong> in {took(result.res.durationMs)}
            {result.res.timedOut ? ' (timed out)' : ''}
            {result.res.truncated ? ' (output cut)' : ''}
          </p>
          <h3>stdout</h3>
          <pre class="log" data-testid="run-stdout">
            {result.res.stdout}
          </pre>
          {result.res.stderr ? (
            <>
              <h3>stderr</h3>
              <pre class="log stderr" data-testid="run-stderr">
                {result.res.stderr}
              </pre>
            </>
          ) : null}
        </div>
      ) : null}
      <h2>This session's history</h2>
      {history.length === 0 ? (
        <p class="muted">Nothing run in this box from this session yet.</p>
      ) : (
        <div class="table-wrap">
          <table data-testid="history-list">
            <thead>
              <tr>
                <th>When</th>
                <th>Kind</th>
                <th>Command</th>
                <th>Exit</th>
                <th>Took</th>
              </tr>
            </thead>
            <tbody>
              {history.map((r) => (
                <tr key={`${r.at}-${r.cmd}`} data-testid="history-item">
                  <td title={r.at}>{ago(r.at)} ago</td>
                  <td>{r.kind}</td>
                  <td class="wrap mono">{r.cmd}</td>
                  <td data-testid="history-exit">{r.exitCode === undefined ? 'running' : (r.exitCode ?? '—')}</td>
                  <td>{r.durationMs !== undefined ? took(r.durationMs) : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
