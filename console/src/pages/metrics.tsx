/**
 * The server's own metrics over the last hour (GET /v1/metrics/history, docs/api.md "Metrics
 * history"): boxes by status, creates and execs per minute, request latency, warm hits. The page
 * asks for the samples newer than its last one once per sampling interval, so the charts move
 * live; uPlot (console/src/chart.ts) comes in its own chunk when the first chart draws.
 */
import type { JSX } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import { api } from '../api';
import type { Chart, ChartSeries } from '../chart';
import { ErrorText, Page, duration } from '../ui';
import './admin.css';

interface MetricsSample {
  at: string;
  boxes: number;
  boxesByStatus: Record<string, number>;
  createsPerMin: number;
  removesPerMin: number;
  execsPerMin: number;
  requestsPerMin: number;
  errorsPerMin: number;
  latencyMsP50: number | null;
  latencyMsP95: number | null;
  latencyMsMean: number | null;
  warmHitsPerMin: number;
  warmReady: number;
}
interface History {
  intervalMs: number;
  samples: MetricsSample[];
}

/** Samples kept on the page: the server's hour at its most (3600). */
const KEEP = 3600;
const COLORS = ['#2f6fed', '#1f8a4c', '#c9372c', '#b7791f', '#7a4fd6', '#0e8f8f', '#667085'];

interface Line {
  /** Also the stat's data-testid: `now-<key>`, `peak-<key>`. */
  key: string;
  label: string;
  pick: (s: MetricsSample) => number | null;
}

function ChartPanel(props: { id: string; title: string; unit: string; lines: Line[]; samples: MetricsSample[] }): JSX.Element {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<Chart | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [ready, setReady] = useState(false);
  const shape = props.lines.map((l) => l.key).join(',');

  // The chart is made again when its lines change (a box status appeared), else only fed new data.
  useEffect(() => {
    let gone = false;
    let observer: ResizeObserver | undefined;
    import('../chart')
      .then(({ createChart }) => {
        if (gone || !host.current) return;
        const series: ChartSeries[] = props.lines.map((l, i) => ({ label: l.label, stroke: COLORS[i % COLORS.length]! }));
        chart.current = createChart(host.current, { series, unit: props.unit });
        const el = host.current;
        observer = new ResizeObserver(() => chart.current?.resize(el.clientWidth));
        observer.observe(el);
        setReady(true);
      })
      .catch((err: unknown) => setError(err));
    return () => {
      gone = true;
      observer?.disconnect();
      chart.current?.destroy();
      chart.current = undefined;
      setReady(false);
    };
  }, [shape]);

  useEffect(() => {
    chart.current?.setData(
      props.samples.map((s) => Date.parse(s.at) / 1000),
      props.lines.map((l) => props.samples.map(l.pick)),
    );
  }, [props.samples, ready]);

  const last = props.samples.at(-1);
  return (
    <section class="panel chart-panel" aria-label={props.title}>
      <h2>{props.title}</h2>
      <ErrorText error={error} />
      <div class="chart" ref={host} data-testid={`chart-${props.id}`} data-drawn={ready ? String(props.samples.length) : undefined} />
      <dl class="stats">
        {props.lines.map((l) => {
          const values = props.samples.map(l.pick).filter((v): v is number => v !== null);
          const now = last ? l.pick(last) : null;
          return (
            <div key={l.key}>
              <dt>{l.label}</dt>
              <dd>
                now <span data-testid={`now-${l.key}`}>{now ?? '—'}</span> · peak{' '}
                <span data-testid={`peak-${l.key}`}>{values.length > 0 ? Math.max(...values) : '—'}</span>
              </dd>
            </div>
          );
        })}
      </dl>
    </section>
  );
}

export function MetricsPage(): JSX.Element {
  const [history, setHistory] = useState<History | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);

  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let kept: MetricsSample[] = [];
    const run = async (): Promise<void> => {
      let every = 10_000;
      try {
        const last = kept.at(-1);
        const got = await api<History>(`/v1/metrics/history${last ? `?after=${encodeURIComponent(last.at)}` : ''}`, { signal: ctl.signal });
        if (ctl.signal.aborted) return;
        every = got.intervalMs;
        if (!last || got.samples.length > 0) {
          kept = [...kept, ...got.samples].slice(-KEEP);
          setHistory({ intervalMs: got.intervalMs, samples: kept });
        }
        setError(undefined);
      } catch (err) {
        if (ctl.signal.aborted) return;
        setError(err);
      }
      // Once per sample, never faster than a second; slower while the tab is hidden.
      const wait = Math.max(every, 1000);
      timer = setTimeout(() => void run(), document.hidden ? wait * 5 : wait);
    };
    void run();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, []);

  if (!history) {
    return <Page title="Metrics">{error ? <ErrorText error={error} /> : <p class="loading">Loading…</p>}</Page>;
  }
  const samples = history.samples;
  const statuses = [...new Set(samples.flatMap((s) => Object.keys(s.boxesByStatus)))].sort();
  return (
    <Page title="Metrics">
      <ErrorText error={error} />
      <p class="hint">
        The last hour of this server, one sample every {history.intervalMs < 1000 ? `${history.intervalMs} ms` : duration(history.intervalMs)}; rates are per
        minute over each interval.
        {samples.length === 0 ? ' The first sample comes one interval after the server started.' : ''}
      </p>
      <div class="charts">
        <ChartPanel
          id="boxes"
          title="Boxes"
          unit="boxes"
          samples={samples}
          lines={[
            { key: 'boxes', label: 'all', pick: (s) => s.boxes },
            ...statuses.map((st) => ({ key: `boxes-${st}`, label: st, pick: (s: MetricsSample) => s.boxesByStatus[st] ?? 0 })),
          ]}
        />
        <ChartPanel
          id="rates"
          title="Creates and execs"
          unit="per min"
          samples={samples}
          lines={[
            { key: 'createsPerMin', label: 'creates', pick: (s) => s.createsPerMin },
            { key: 'execsPerMin', label: 'execs', pick: (s) => s.execsPerMin },
            { key: 'removesPerMin', label: 'removes', pick: (s) => s.removesPerMin },
          ]}
        />
        <ChartPanel
          id="latency"
          title="Request latency"
          unit="ms"
          samples={samples}
          lines={[
            { key: 'latencyMsP50', label: 'p50', pick: (s) => s.latencyMsP50 },
            { key: 'latencyMsP95', label: 'p95', pick: (s) => s.latencyMsP95 },
            { key: 'latencyMsMean', label: 'mean', pick: (s) => s.latencyMsMean },
          ]}
        />
        <ChartPanel
          id="warm"
          title="Warm pools"
          unit="per min / spares"
          samples={samples}
          lines={[
            { key: 'warmHitsPerMin', label: 'hits per min', pick: (s) => s.warmHitsPerMin },
            { key: 'warmReady', label: 'spares ready', pick: (s) => s.warmReady },
          ]}
        />
      </div>
    </Page>
  );
}
