import { h, type ComponentChildren } from 'preact';
import htm from 'htm';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api.js';

export const html = htm.bind(h);

export function message(err: unknown): string {
  if (err instanceof ApiError) return `${err.status}: ${err.message}`;
  return err instanceof Error ? err.message : String(err);
}

export function ErrorLine({ error }: { error?: string }) {
  return error ? html`<p class="error" role="alert">${error}</p>` : null;
}

/**
 * A modal confirmation (the native <dialog>: focus moves into it, Escape cancels). `onConfirm`
 * runs when the named button is pressed.
 */
export function Confirm(p: {
  title: string;
  body: ComponentChildren;
  action: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
  }, []);
  return html`<dialog ref=${ref} class="confirm" data-test="confirm" onCancel=${(e: Event) => {
    e.preventDefault();
    p.onCancel();
  }}>
    <h2>${p.title}</h2>
    <div>${p.body}</div>
    <form method="dialog" class="row" onSubmit=${(e: Event) => {
      e.preventDefault();
      p.onConfirm();
    }}>
      <button type="button" onClick=${p.onCancel}>Cancel</button>
      <button type="submit" class=${p.danger ? 'danger' : 'primary'} data-test="confirm-ok" autofocus>${p.action}</button>
    </form>
  </dialog>`;
}

/**
 * A page's actions, one at a time: which one runs (`busy`, its label), the error of the last, and
 * the `warning` its answer carried (a verb that worked but not as asked: a restore that cold-booted).
 */
export function useAction(): {
  busy?: string;
  error?: string;
  warning?: string;
  run: (label: string, fn: () => Promise<unknown>) => Promise<void>;
} {
  const [busy, setBusy] = useState<string>();
  const [error, setError] = useState<string>();
  const [warning, setWarning] = useState<string>();
  const run = async (label: string, fn: () => Promise<unknown>) => {
    setBusy(label);
    setError(undefined);
    setWarning(undefined);
    try {
      setWarning(((await fn()) as { warning?: string } | undefined)?.warning);
    } catch (err) {
      setError(message(err));
    } finally {
      setBusy(undefined);
    }
  };
  return { busy, error, warning, run };
}

/** Loads `fn` now and every `everyMs` (if given); re-runs when `deps` change. */
export function useLoad<T>(
  fn: () => Promise<T>,
  deps: unknown[],
  everyMs?: number,
): { data?: T; error?: string; reload: () => void } {
  const [state, setState] = useState<{ data?: T; error?: string }>({});
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    const run = () =>
      fn().then(
        (data) => live && setState({ data }),
        (err) => live && setState((s) => ({ data: s.data, error: message(err) })),
      );
    run();
    const t = everyMs ? setInterval(run, everyMs) : undefined;
    return () => {
      live = false;
      if (t) clearInterval(t);
    };
  }, [...deps, n]);
  return { ...state, reload: () => setN((x) => x + 1) };
}

export function bytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

export function when(iso: string | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function StatusBadge({ status }: { status: string }) {
  return html`<span class=${`badge s-${status}`} data-test="status">${status}</span>`;
}
