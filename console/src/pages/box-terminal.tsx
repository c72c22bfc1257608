/**
 * The Terminal tab: shells in the box through the exec WebSocket (console/src/terminal.ts), in
 * tabs of their own — "+" opens another, each with its own socket; closing one ends its shell.
 * Each terminal opened goes into this session's exec history with its exit code.
 */
import type { JSX } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { recordExec } from '../history';
import { SHELL_LINE, openTerminal } from '../terminal';
import type { TerminalHandle, TerminalState } from '../terminal';
import type { BoxInfo } from '../types';
import { ErrorText } from '../ui';
import './box-terminal.css';

interface Session {
  key: number;
  title: string;
}

function describe(state: TerminalState): string {
  switch (state.kind) {
    case 'connecting':
      return 'connecting…';
    case 'open':
      return 'connected';
    case 'exited':
      return `exited with code ${state.exitCode}`;
    case 'closed':
      return `closed: ${state.reason}`;
    case 'error':
      return 'refused';
  }
}

/** One terminal: opens its socket when mounted, closes it when unmounted. */
function TerminalPane(props: { boxId: string; active: boolean; onEnded: (ended: boolean) => void }): JSX.Element {
  const host = useRef<HTMLDivElement>(null);
  const handle = useRef<TerminalHandle | undefined>(undefined);
  const [state, setState] = useState<TerminalState>({ kind: 'connecting' });

  useEffect(() => {
    let gone = false;
    let complete: ((end: { exitCode: number | null }) => void) | undefined;
    const finish = (exitCode: number | null): void => {
      complete?.({ exitCode });
      complete = undefined;
    };
    openTerminal(host.current!, {
      boxId: props.boxId,
      onOpen: () => {
        complete = recordExec(props.boxId, { kind: 'terminal', cmd: SHELL_LINE });
      },
      onState: (s) => {
        if (gone) return;
        setState(s);
        props.onEnded(s.kind !== 'connecting' && s.kind !== 'open');
        if (s.kind === 'exited') finish(s.exitCode);
        else if (s.kind === 'closed' || s.kind === 'error') finish(null);
      },
    }).then(
      (h) => {
        if (gone) h.dispose();
        else {
          handle.current = h;
          h.focus();
        }
      },
      (err: unknown) => !gone && setState({ kind: 'error', error: err }),
    );
    return () => {
      gone = true;
      finish(null);
      handle.current?.dispose();
      handle.current = undefined;
    };
  }, [props.boxId]);

  useEffect(() => {
    if (!props.active) return;
    handle.current?.fit();
    handle.current?.focus();
  }, [props.active]);

  return (
    <div class="term-pane" hidden={!props.active} data-testid="terminal-pane" data-state={state.kind}>
      <div class="terminal" ref={host} data-testid="terminal" />
      <p class="term-status" data-testid="terminal-status" role="status">
        {describe(state)}
      </p>
      {state.kind === 'error' ? <ErrorText error={state.error} /> : null}
    </div>
  );
}

export function TerminalTab({ box }: { box: BoxInfo }): JSX.Element {
  const next = useRef(box.status === 'running' ? 1 : 0);
  // A running box gets a shell right away; any other is not woken (a shell is a use) until asked.
  const [sessions, setSessions] = useState<Session[]>(() => (box.status === 'running' ? [{ key: 0, title: 'Terminal 1' }] : []));
  const [active, setActive] = useState(0);
  const [ended, setEnded] = useState<Record<number, boolean>>({});

  const add = (): void => {
    const key = next.current++;
    setSessions((list) => [...list, { key, title: `Terminal ${key + 1}` }]);
    setActive(key);
  };
  const close = (key: number): void => {
    const rest = sessions.filter((s) => s.key !== key);
    setSessions(rest);
    if (active === key && rest.length > 0) setActive(rest[rest.length - 1]!.key);
  };

  return (
    <div class="term-tab">
      <div class="tabs term-tabs" role="tablist" aria-label="Terminals">
        {sessions.map((s) => (
          <span class="term-tab-head" key={s.key}>
            <button
              type="button"
              role="tab"
              aria-selected={s.key === active}
              data-testid="terminal-tab"
              class={ended[s.key] ? 'ended' : ''}
              onClick={() => setActive(s.key)}
            >
              {s.title}
            </button>
            <button type="button" class="term-close" aria-label={`Close ${s.title}`} data-testid="terminal-close" onClick={() => close(s.key)}>
              ×
            </button>
          </span>
        ))}
        <button type="button" aria-label="New terminal" title="New terminal" data-testid="terminal-new" onClick={add}>
          +
        </button>
      </div>
      {sessions.length === 0 ? (
        <p class="muted" data-testid="terminal-none">
          {box.status === 'running' ? 'No terminal open' : `The box is ${box.status}`}: “+” opens a terminal
          {box.status === 'paused' || box.status === 'archived' ? `, which resumes the box` : ''}.
        </p>
      ) : null}
      {sessions.map((s) => (
        <TerminalPane key={s.key} boxId={box.id} active={s.key === active} onEnded={(e) => setEnded((m) => (m[s.key] === e ? m : { ...m, [s.key]: e }))} />
      ))}
    </div>
  );
}
