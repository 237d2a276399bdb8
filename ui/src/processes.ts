import { useEffect, useState } from 'preact/hooks';
import { api, enc, ndjson, type OutputFrame, type ProcessInfo } from './api.js';
import { processState, TIMELINE_HEADER } from '../../src/domain/processes.js';
import { movedBack } from '../../src/domain/timeline.js';
import { ErrorLine, html, message, useLoad, when } from './ui.js';

/** Characters of output the page keeps for the process on show (older ones scroll out). */
const KEEP_CHARS = 200_000;

/** Lines of each stream the page shows first: what a process printed lately, not all that is kept. */
const TAIL_LINES = 2000;

/** How long the page waits before it reads again after a read broke off, at most. */
const RETRY_MS = 2000;

/**
 * A process's output frames from its last TAIL_LINES lines on (from its first kept byte in a VM
 * whose agent cannot read by lines: an image built before that answers 501), followed until it
 * ends. A read that breaks off (the daemon restarted, the VM suspended and restored or reverted)
 * is made again from the offsets seen, on their timeline (docs/processes.md, "After a revert").
 */
async function* recentOutput(vm: string, id: string, signal: AbortSignal): AsyncGenerator<OutputFrame> {
  const pos: Record<string, number> = {};
  let all: number | undefined;
  let timeline: string | undefined;
  let start = `tail=${TAIL_LINES}`;
  let wait = 250;
  // Until a first frame came, a read broken off is asked for as it was (the tail again).
  let read = false;
  while (!signal.aborted) {
    try {
      const path = `/vms/${enc(vm)}/processes/${enc(id)}/output?${start}&follow=1`;
      const onResponse = (res: Response) => (timeline = res.headers.get(TIMELINE_HEADER) ?? timeline);
      for await (const f of ndjson<OutputFrame>('GET', path, { signal, onResponse })) {
        if ('start' in f) Object.assign(pos, f.start);
        else if ('stream' in f) pos[f.stream] = f.offset + byteLength(f);
        else if ('truncated' in f) pos[f.truncated.stream] = Math.max(pos[f.truncated.stream] ?? 0, f.truncated.before);
        else if ('reverted' in f) all = movedBack(pos, all, f.reverted.from);
        wait = 250;
        read = true;
        yield f;
        if ('reason' in f) return;
      }
    } catch (err) {
      if (signal.aborted) return;
      const status = (err as { status?: number }).status;
      if (status === 501 && start.startsWith('tail=')) {
        start = 'from=0';
        continue;
      }
      // A bad request, a process gone: not made better by asking again.
      if (status !== undefined && status < 500) throw err;
    }
    const seen = Object.entries(pos).map(([s, n]) => `${s}:${n}`);
    if (read)
      start = `from=${seen.length ? seen.join(',') : (all ?? 0)}${timeline ? `&timeline=${enc(timeline)}` : ''}`;
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, RETRY_MS);
  }
}

/** How many bytes a frame carries. */
function byteLength(f: { data: string; encoding?: 'base64' }): number {
  return f.encoding === 'base64' ? atob(f.data).length : new TextEncoder().encode(f.data).length;
}

/** One process's output, followed live (docs/processes.md). */
function Output({ vm, p }: { vm: string; p: ProcessInfo }) {
  const [text, setText] = useState('');
  const [end, setEnd] = useState<string>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    const ac = new AbortController();
    setText('');
    setEnd(undefined);
    setError(undefined);
    void (async () => {
      try {
        for await (const f of recentOutput(vm, p.id, ac.signal)) {
          if ('start' in f) continue;
          if ('stream' in f) {
            const data = f.encoding === 'base64' ? atob(f.data) : f.data;
            setText((t) => (t + data).slice(-KEEP_CHARS));
          } else if ('truncated' in f)
            setText((t) => `${t}[${f.truncated.stream}: output before byte ${f.truncated.before} is no longer kept]\n`);
          else if ('reverted' in f)
            setText(
              (t) =>
                `${t}\n[the VM was reverted to a snapshot: what follows is the reverted guest's output from ${Object.entries(
                  f.reverted.from,
                )
                  .map(([s, n]) => `${s} byte ${n}`)
                  .join(', ')}]\n`,
            );
          else if ('reason' in f)
            setEnd(
              f.reason === 'exit'
                ? `exited ${f.exit_code}`
                : f.reason === 'signal'
                  ? `killed (${f.signal})`
                  : `ended (${f.reason})`,
            );
        }
      } catch (err) {
        if (!ac.signal.aborted) setError(message(err));
      }
    })();
    return () => ac.abort();
  }, [vm, p.id]);
  return html`<div data-test="process-output">
    <pre class="console">${text}</pre>
    ${end ? html`<p class="muted" data-test="process-end">${end}</p>` : null}
    <${ErrorLine} error=${error} />
  </div>`;
}

/**
 * A VM's durable processes: the list (refreshed every few seconds), a line to start one, and the
 * chosen one's output as it comes. They run on when the page goes.
 */
export function Processes({ name }: { name: string }) {
  const list = useLoad(() => api<ProcessInfo[]>('GET', `/vms/${enc(name)}/processes`), [name], 3000);
  const [chosen, setChosen] = useState<string>();
  const [line, setLine] = useState('');
  const [restart, setRestart] = useState<'no' | 'on-failure' | 'always'>('no');
  const [error, setError] = useState<string>();
  const start = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      const p = await api<ProcessInfo>('POST', `/vms/${enc(name)}/processes`, {
        body: { cmd: '/bin/sh', args: ['-c', line], restart },
      });
      setLine('');
      setChosen(p.id);
      list.reload();
    } catch (err) {
      setError(message(err));
    }
  };
  const act = (id: string, how: 'TERM' | 'KILL' | 'forget') => async () => {
    setError(undefined);
    try {
      if (how === 'forget') await api('DELETE', `/vms/${enc(name)}/processes/${enc(id)}`);
      else await api('POST', `/vms/${enc(name)}/processes/${enc(id)}/signal`, { body: { signal: how } });
      list.reload();
    } catch (err) {
      setError(message(err));
    }
  };
  const procs = [...(list.data ?? [])].reverse();
  const shown = procs.find((p) => p.id === chosen);
  return html`<section class="card" data-test="processes">
    <h3>Processes</h3>
    <p class="muted">Processes here outlive this page, the daemon and the agent: start one, come back later, and read everything it printed.</p>
    <form class="row" onSubmit=${start}>
      <input name="process_cmd" style="flex: 1" placeholder="a shell command, e.g. python3 -m http.server 8000" value=${line} onInput=${(ev: Event) => setLine((ev.target as HTMLInputElement).value)} />
      <select name="process_restart" title="start it again when it ends" value=${restart} onChange=${(ev: Event) => setRestart((ev.target as HTMLSelectElement).value as typeof restart)}>
        <option value="no">no restart</option>
        <option value="on-failure">restart on failure</option>
        <option value="always">restart always</option>
      </select>
      <button type="submit" class="primary" disabled=${!line.trim()} data-test="process-start">Start</button>
    </form>
    <${ErrorLine} error=${error ?? list.error} />
    ${
      procs.length === 0
        ? html`<p class="muted">None yet.</p>`
        : html`<table data-test="process-list"><thead><tr><th>Id</th><th>Tag</th><th>Command</th><th>State</th><th>Started</th><th></th></tr></thead><tbody>
      ${procs.map(
        (p) => html`<tr class=${p.id === chosen ? 'on' : ''} data-test=${`process-${p.id}`}>
          <td><a href="javascript:void 0" onClick=${() => setChosen(p.id)}>${p.id}</a></td><td>${p.tag ?? ''}</td>
          <td><code>${[p.cmd, ...p.args].join(' ').slice(0, 80)}</code></td><td>${processState(p)}</td><td>${when(p.started_at)}</td>
          <td>${p.state === 'running' ? html`<button onClick=${act(p.id, 'TERM')}>Stop</button> <button onClick=${act(p.id, 'KILL')}>Kill</button>` : html`<button onClick=${act(p.id, 'forget')}>Forget</button>`}</td>
        </tr>`,
      )}
    </tbody></table>`
    }
    ${shown ? html`<h4>${shown.id} output</h4><${Output} vm=${name} p=${shown} />` : null}
  </section>`;
}
