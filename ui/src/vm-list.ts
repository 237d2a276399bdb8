import { useState } from 'preact/hooks';
import { api, enc, ndjson, type ProgressEvent } from './api.js';
import { VmActions } from './actions.js';
import { useVms } from './feed.js';
import { ErrorLine, html, message, StatusBadge, useLoad } from './ui.js';

interface ImageInfo {
  id: string;
  description: string;
  built?: boolean;
  agent_ready: boolean;
}

/** The create form: POST /vms?stream=1 and the progress lines as they come. */
function CreateForm() {
  const images = useLoad(() => api<ImageInfo[]>('GET', '/images'), []);
  const [form, setForm] = useState({ name: '', image: '', cpus: '', memory_mb: '', disk_gb: '', persistent: false });
  const [events, setEvents] = useState<ProgressEvent[]>([]);
  const [running, setRunning] = useState(false);
  const [error, setError] = useState<string>();
  const set = (k: string) => (e: Event) => {
    const t = e.target as HTMLInputElement;
    setForm({ ...form, [k]: t.type === 'checkbox' ? t.checked : t.value });
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    setRunning(true);
    setError(undefined);
    setEvents([]);
    const body: Record<string, unknown> = { persistent: form.persistent };
    if (form.name.trim()) body.name = form.name.trim();
    if (form.image) body.image = form.image;
    for (const k of ['cpus', 'memory_mb', 'disk_gb'] as const) if (form[k]) body[k] = Number(form[k]);
    try {
      for await (const ev of ndjson<ProgressEvent>('POST', '/vms?stream=1', { body })) {
        setEvents((xs) => [...xs, ev]);
        if (ev.phase === 'error') setError(ev.error ?? ev.message);
      }
    } catch (err) {
      setError(message(err));
    } finally {
      setRunning(false);
    }
  };
  const last = events[events.length - 1];
  return html`<section class="card">
    <h2>New VM</h2>
    <form class="create" onSubmit=${submit} data-test="create-form">
      <label>Name <input name="name" value=${form.name} onInput=${set('name')} placeholder="generated" pattern="[a-z0-9][a-z0-9-]{0,62}" /></label>
      <label>Image <select name="image" value=${form.image} onChange=${set('image')}>
        <option value="">default</option>
        ${(images.data ?? []).map((i) => html`<option value=${i.id}>${i.id}${i.built === false ? ' (not built)' : ''}</option>`)}
      </select></label>
      <label>CPUs <input name="cpus" type="number" min="1" value=${form.cpus} onInput=${set('cpus')} placeholder="1" /></label>
      <label>Memory MB <input name="memory_mb" type="number" min="64" value=${form.memory_mb} onInput=${set('memory_mb')} placeholder="512" /></label>
      <label>Disk GB <input name="disk_gb" type="number" min="1" value=${form.disk_gb} onInput=${set('disk_gb')} placeholder="4" /></label>
      <label class="check"><input name="persistent" type="checkbox" checked=${form.persistent} onChange=${set('persistent')} /> persistent</label>
      <button type="submit" class="primary" disabled=${running} data-test="create-submit">${running ? 'Creating…' : 'Create'}</button>
    </form>
    ${
      events.length > 0
        ? html`<div class="progress" data-test="create-progress" aria-live="polite">
      ${last?.percent !== undefined && last.phase !== 'ready' ? html`<progress max="100" value=${last.percent}></progress>` : null}
      <ol>${events.map((ev) => html`<li class=${`phase-${ev.phase}`}><b>${ev.phase}</b> ${ev.message} <span class="muted">${(ev.elapsed_ms / 1000).toFixed(1)} s</span></li>`)}</ol>
      ${last?.phase === 'ready' && last.instance ? html`<p>Ready: <a href=${`#/vm/${enc(last.instance.name)}`}>${last.instance.name}</a></p>` : null}
    </div>`
        : null
    }
    <${ErrorLine} error=${error} />
  </section>`;
}

/** The VM list, live from the change feed, with each VM's actions. */
export function VmList() {
  const { vms, connected } = useVms();
  // In a cluster every VM names its node (docs/cluster.md).
  const nodeOf = (vm: object) => (vm as { node?: string }).node;
  const cluster = vms.some((vm) => nodeOf(vm) !== undefined);
  return html`<div>
    <${CreateForm} />
    <section class="card">
      <h2>VMs <span class=${connected ? 'live on' : 'live'} title="live updates" data-test="live">${connected ? 'live' : 'reconnecting…'}</span></h2>
      ${
        vms.length === 0
          ? html`<p class="muted">No VMs yet.</p>`
          : html`<table class="vms" data-test="vm-table">
        <thead><tr><th>Name</th>${cluster ? html`<th>Node</th>` : null}<th>Status</th><th>Image</th><th>CPUs</th><th>Memory</th><th>IP</th><th>Actions</th></tr></thead>
        <tbody>${vms.map(
          (vm) => html`<tr key=${vm.name} data-vm=${vm.name}>
          <td><a href=${`#/vm/${enc(vm.name)}`}>${vm.name}</a>${vm.persistent ? html` <span class="tag">persistent</span>` : null}</td>
          ${cluster ? html`<td data-test="node">${nodeOf(vm) ?? '-'}</td>` : null}
          <td><${StatusBadge} status=${vm.status} /></td>
          <td>${vm.image}</td><td>${vm.cpus}</td><td>${vm.memory_mb} MB</td><td>${vm.ip}</td>
          <td><${VmActions} vm=${vm} /></td>
        </tr>`,
        )}</tbody>
      </table>`
      }
    </section>
  </div>`;
}
