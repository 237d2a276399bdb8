import { useState } from 'preact/hooks';
import { api, enc, request, type Instance } from './api.js';
import { VmActions } from './actions.js';
import { StatsChart, type MetricsPoint } from './chart.js';
import { useVm } from './feed.js';
import { Egress } from './egress.js';
import { Processes } from './processes.js';
import { ShapeEditor } from './shape-editor.js';
import { Snapshots } from './snapshots.js';
import { FileBrowser } from './files.js';
import { TerminalView } from './terminal.js';
import { ErrorLine, html, message, StatusBadge, useLoad, when } from './ui.js';

function Fields({ vm }: { vm: Instance }) {
  const rows: [string, unknown][] = [
    ['status', html`<${StatusBadge} status=${vm.status} />`],
    // On a node of a cluster every VM names its node (docs/cluster.md).
    ...((vm as { node?: string }).node ? [['node', (vm as { node?: string }).node] as [string, unknown]] : []),
    ['image', vm.image],
    ['persistent', vm.persistent ? 'yes' : 'no'],
    ['cpus', vm.cpus],
    ['memory', `${vm.memory_mb} MB`],
    ['disk', `${vm.disk_gb} GB`],
    ['ip', vm.ip],
    ['ssh port', vm.ssh_port || ''],
    ['created', when(vm.created_at)],
    ['updated', when(vm.updated_at)],
    ...(vm.suspended_at ? [['suspended', when(vm.suspended_at)] as [string, unknown]] : []),
    ...Object.entries(vm.tags ?? {}).map(([k, v]) => [`tag ${k}`, v] as [string, unknown]),
  ];
  return html`<dl class="fields" data-test="fields">${rows.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
}

function Forwards({ vm }: { vm: Instance }) {
  const [guest, setGuest] = useState('');
  const [host, setHost] = useState('');
  const [error, setError] = useState<string>();
  const run = async (fn: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await fn();
    } catch (err) {
      setError(message(err));
    }
  };
  const add = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      await api('POST', `/vms/${enc(vm.name)}/forwards`, {
        body: { guest_port: Number(guest), ...(host ? { host_port: Number(host) } : {}) },
      });
      setGuest('');
      setHost('');
    });
  };
  return html`<section class="card" data-test="forwards">
    <h3>Port forwards</h3>
    ${
      vm.forwards.length === 0
        ? html`<p class="muted">None.</p>`
        : html`<table><thead><tr><th>Host</th><th>Guest</th><th>Kind</th><th></th></tr></thead><tbody>
      ${vm.forwards.map(
        (f) => html`<tr><td>127.0.0.1:${f.host_port}</td><td>${f.guest_port}</td><td>${f.kind ?? ''}</td>
        <td>${f.kind === 'live' ? html`<button type="button" class="small" onClick=${() => run(() => api('DELETE', `/vms/${enc(vm.name)}/forwards/${f.host_port}`))}>remove</button>` : null}</td></tr>`,
      )}
    </tbody></table>`
    }
    <form class="row" onSubmit=${add}>
      <label>Guest port <input name="guest_port" type="number" min="1" max="65535" required value=${guest} onInput=${(e: Event) => setGuest((e.target as HTMLInputElement).value)} /></label>
      <label>Host port <input name="host_port" type="number" min="1024" max="65535" placeholder="any" value=${host} onInput=${(e: Event) => setHost((e.target as HTMLInputElement).value)} /></label>
      <button type="submit" disabled=${vm.status !== 'running'}>Add forward</button>
    </form>
    <${ErrorLine} error=${error} />
  </section>`;
}

function Stats({ name }: { name: string }) {
  const h = useLoad(
    () =>
      api<{ enabled: boolean; interval_sec: number; points: MetricsPoint[] }>(
        'GET',
        `/vms/${enc(name)}/metrics?limit=720`,
      ),
    [name],
    5000,
  );
  return html`<section class="card">
    <h3>Stats history</h3>
    ${h.data && !h.data.enabled ? html`<p class="muted">Sampling is off for this VM (metrics_enabled).</p>` : null}
    ${h.data && h.data.points.length === 0 ? html`<p class="muted">No samples yet.</p>` : null}
    ${h.data && h.data.points.length > 0 ? html`<${StatsChart} points=${h.data.points} />` : null}
    <${ErrorLine} error=${h.error} />
  </section>`;
}

function Console({ name }: { name: string }) {
  const log = useLoad(async () => (await request('GET', `/vms/${enc(name)}/logs?tail=32768`)).text(), [name], 5000);
  return html`<section class="card">
    <h3>Console log <button type="button" class="small" onClick=${log.reload}>refresh</button></h3>
    <pre class="console" data-test="console" tabindex="0">${log.data ?? ''}</pre>
    <${ErrorLine} error=${log.error} />
  </section>`;
}

/** One VM: its fields and actions, forwards, stats and console; its terminal; its files. */
export function VmPage({ name, tab }: { name: string; tab: string }) {
  const { vm, connected } = useVm(name);
  if (!vm)
    return html`<section class="card"><p>${connected ? html`No VM named <b>${name}</b>. <a href="#/">Back to the list</a>` : 'Loading…'}</p></section>`;
  const tabs = [
    ['overview', 'Overview'],
    ['terminal', 'Terminal'],
    ['files', 'Files'],
    ['processes', 'Processes'],
    ['egress', 'Egress'],
  ];
  return html`<div>
    <section class="card">
      <h2 data-test="vm-title">${vm.name} <${StatusBadge} status=${vm.status} /></h2>
      <${VmActions} vm=${vm} onDeleted=${() => {
        location.hash = '#/';
      }} />
      <nav class="tabs" role="tablist">${tabs.map(([id, label]) => html`<a role="tab" aria-selected=${tab === id} class=${tab === id ? 'on' : ''} href=${`#/vm/${enc(name)}/${id}`} data-test=${`tab-${id}`}>${label}</a>`)}</nav>
    </section>
    ${
      tab === 'terminal'
        ? html`<${TerminalView} name=${name} />`
        : tab === 'files'
          ? html`<${FileBrowser} name=${name} />`
          : tab === 'egress'
            ? html`<${Egress} name=${name} />`
            : tab === 'processes'
              ? html`<${Processes} name=${name} />`
              : html`<${Fields} vm=${vm} />${vm.status === 'stopped' ? html`<${ShapeEditor} vm=${vm} />` : null}<${Snapshots} vm=${vm} /><${Forwards} vm=${vm} /><${Stats} name=${name} /><${Console} name=${name} />`
    }
  </div>`;
}
