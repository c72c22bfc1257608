/** Small pieces every page uses: polling, errors, a confirmation, times and sizes as people read them. */
import type { ComponentChildren, JSX } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api';

export interface Polled<T> {
  data: T | undefined;
  error: unknown;
  /** Fetch again now (after a change this page made). */
  reload: () => void;
}

/**
 * `load()` now and every `everyMs` while the page is visible (0: once); the latest answer and
 * error. A load never overlaps the one before it.
 */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, everyMs: number, deps: unknown[] = []): Polled<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async (): Promise<void> => {
      try {
        const value = await load(ctl.signal);
        if (ctl.signal.aborted) return;
        setData(value);
        setError(undefined);
      } catch (err) {
        if (ctl.signal.aborted) return;
        setError(err);
      }
      if (everyMs > 0) timer = setTimeout(() => void run(), document.hidden ? everyMs * 5 : everyMs);
    };
    void run();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, [tick, ...deps]);
  return { data, error, reload };
}

/** The API's message for an error (never a blank page), with its code. */
export function ErrorText({ error }: { error: unknown }): JSX.Element | null {
  if (error === undefined || error === null) return null;
  const message = error instanceof ApiError ? `${error.message} (${error.code})` : error instanceof Error ? error.message : String(error);
  return (
    <p class="error" role="alert" data-testid="error">
      {message}
    </p>
  );
}

/** Runs an action, showing it is busy and its error; `then` after it succeeded. */
export function useAction<A extends unknown[]>(
  action: (...args: A) => Promise<unknown>,
  then?: () => void,
): { run: (...args: A) => void; busy: boolean; error: unknown } {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const run = (...args: A): void => {
    setBusy(true);
    setError(undefined);
    action(...args)
      .then(() => then?.())
      .catch((err: unknown) => setError(err))
      .finally(() => setBusy(false));
  };
  return { run, busy, error };
}

/** A button that asks once more before it acts (remove, revoke). */
export function ConfirmButton(props: { label: string; confirm: string; onConfirm: () => void; disabled?: boolean; danger?: boolean }): JSX.Element {
  const [asking, setAsking] = useState(false);
  const yes = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) yes.current?.focus();
  }, [asking]);
  if (!asking) {
    return (
      <button type="button" class={props.danger ? 'danger' : ''} disabled={props.disabled} onClick={() => setAsking(true)}>
        {props.label}
      </button>
    );
  }
  return (
    <span class="confirm" role="group" aria-label={props.confirm}>
      <span>{props.confirm}</span>
      <button
        type="button"
        ref={yes}
        class="danger"
        data-testid="confirm"
        onClick={() => {
          setAsking(false);
          props.onConfirm();
        }}
      >
        Yes, {props.label.toLowerCase()}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

export function Page(props: { title: string; actions?: ComponentChildren; children: ComponentChildren }): JSX.Element {
  useEffect(() => {
    document.title = `${props.title} · sbx`;
  }, [props.title]);
  return (
    <section class="page">
      <header class="page-head">
        <h1>{props.title}</h1>
        <div class="actions">{props.actions}</div>
      </header>
      {props.children}
    </section>
  );
}

/** "3 s", "5 min", "2 h", "4 d" since (or until) an ISO time. */
export function ago(iso: string | undefined | null, now = Date.now()): string {
  if (!iso) return '—';
  return duration(Math.abs(now - Date.parse(iso)));
}

export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86400) return `${Math.round(s / 360) / 10} h`;
  return `${Math.round(s / 8640) / 10} d`;
}

export function bytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function Status({ status }: { status: string }): JSX.Element {
  return <span class={`status status-${status}`}>{status}</span>;
}

/** A labelled form field. */
export function Field(props: { label: string; hint?: string; children: ComponentChildren }): JSX.Element {
  return (
    <label class="field">
      <span class="label">{props.label}</span>
      {props.children}
      {props.hint ? <span class="hint">{props.hint}</span> : null}
    </label>
  );
}
