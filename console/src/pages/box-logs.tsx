/**
 * The logs tab: the output of the box's command (GET /v1/boxes/:id/logs, JSON lines), its last
 * lines, refreshed on demand or followed as it is written. Reading the log is not use of the box.
 */
import type { JSX } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, request } from '../api';
import type { BoxInfo } from '../types';
import { ErrorText } from '../ui';
import { boxPath } from './boxes';

interface LogLine {
  stream: 'stdout' | 'stderr';
  data: string;
  time: string;
}

const TAILS = [100, 500, 2000];
/** Chunks kept on screen while following; older ones drop off the top. */
const MAX_CHUNKS = 5000;

/** Reads a JSON-lines body, calling `line` for each parsed line; resolves when it ends. A `{"error"}` line throws. */
async function readLines(res: Response, line: (l: LogLine) => void): Promise<void> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  const take = (text: string): void => {
    if (text.trim() === '') return; // a keep-alive
    const v = JSON.parse(text) as LogLine | { error: { code?: string; message?: string } };
    if ('error' in v) throw new ApiError(500, v.error.code ?? 'internal', v.error.message ?? 'the log ended with an error');
    line(v);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += value;
    const lines = rest.split('\n');
    rest = lines.pop() ?? '';
    for (const l of lines) take(l);
  }
  take(rest);
}

export function LogsTab({ box }: { box: BoxInfo }): JSX.Element {
  const [tail, setTail] = useState(TAILS[0]!);
  const [follow, setFollow] = useState(false);
  const [tick, setTick] = useState(0);
  const [lines, setLines] = useState<LogLine[]>([]);
  const [state, setState] = useState<'loading' | 'following' | 'done' | 'ended'>('loading');
  const [error, setError] = useState<unknown>(undefined);
  const pre = useRef<HTMLPreElement>(null);

  useEffect(() => {
    const ctl = new AbortController();
    let got: LogLine[] = [];
    let pending = false;
    // While following, lines arrive one by one: shown once a frame, not once a line.
    const flush = (): void => {
      pending = false;
      if (!ctl.signal.aborted) setLines(got.slice());
    };
    setState('loading');
    setError(undefined);
    const q = new URLSearchParams({ tail: String(tail), ...(follow ? { follow: 'true' } : {}) });
    (async () => {
      const res = await request(`${boxPath(box.id, '/logs')}?${q}`, { signal: ctl.signal });
      if (follow) setState('following');
      await readLines(res, (l) => {
        got.push(l);
        if (got.length > MAX_CHUNKS) got = got.slice(-MAX_CHUNKS);
        if (!pending) {
          pending = true;
          requestAnimationFrame(flush);
        }
      });
      flush();
      setState(follow ? 'ended' : 'done');
    })().catch((err: unknown) => {
      if (ctl.signal.aborted) return;
      flush();
      setError(err);
      setState('done');
    });
    return () => ctl.abort();
  }, [box.id, tail, follow, tick]);

  // Following keeps the newest line in view.
  useEffect(() => {
    if (follow && pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [lines, follow]);

  return (
    <section class="box-logs">
      <div class="row logs-controls">
        <label class="row">
          <span>Last</span>
          <select value={tail} onChange={(e) => setTail(Number(e.currentTarget.value))} aria-label="Lines">
            {TAILS.map((n) => (
              <option key={n} value={n}>
                {n} lines
              </option>
            ))}
          </select>
        </label>
        <label class="row">
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.currentTarget.checked)} data-testid="logs-follow" />
          <span>Follow</span>
        </label>
        <button type="button" onClick={() => setTick((t) => t + 1)} data-testid="logs-refresh">
          Refresh
        </button>
        <span class="muted" data-testid="logs-state">
          {state === 'loading' ? 'Loading…' : state === 'following' ? 'Following…' : state === 'ended' ? 'The command ended.' : `${lines.length} chunks`}
        </span>
      </div>
      <ErrorText error={error} />
      <pre class="log" ref={pre} data-testid="box-logs" tabIndex={0} aria-label="Log">
        {lines.length === 0 && state !== 'loading' ? <span class="muted">No output.</span> : null}
        {lines.map((l, i) => (
          <span key={i} class={l.stream === 'stderr' ? 'stderr' : undefined} title={l.time}>
            {l.data}
          </span>
        ))}
      </pre>
    </section>
  );
}
