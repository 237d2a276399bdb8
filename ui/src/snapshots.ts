import { useState } from 'preact/hooks';
import { api, enc, type Instance } from './api.js';
import { Confirm, ErrorLine, html, useAction, useLoad, when } from './ui.js';

/** A VM's named snapshot, as GET /vms/{name}/snapshots lists it (docs/snapshots.md). */
interface VmSnapshot {
  name: string;
  created_at: string;
  memory: boolean;
  taken_from: string;
  cpus: number;
  memory_mb: number;
  disk_gb: number;
  description?: string;
}

/**
 * A VM's snapshots: take one (a running VM's with its memory), revert to one in place (asked
 * first: what happened since is lost), delete one. The daemon's words come back when it refuses;
 * the VM's own state shows through the change feed.
 */
export function Snapshots({ vm }: { vm: Instance }) {
  const list = useLoad(() => api<VmSnapshot[]>('GET', `/vms/${enc(vm.name)}/snapshots`), [vm.name]);
  const [name, setName] = useState('');
  const [asking, setAsking] = useState<string>();
  const action = useAction();
  const { busy, error, warning } = action;
  const run = (what: string, fn: () => Promise<unknown>) => action.run(what, fn).then(list.reload);
  const take = (e: Event) => {
    e.preventDefault();
    void run('take', async () => {
      await api('POST', `/vms/${enc(vm.name)}/snapshots`, { body: name ? { name } : {} });
      setName('');
    });
  };
  const snaps = list.data ?? [];
  return html`<section class="card" data-test="snapshots">
    <h3>Snapshots</h3>
    ${
      snaps.length === 0
        ? html`<p class="muted">None. A snapshot of a running VM keeps its memory and processes too.</p>`
        : html`<table><thead><tr><th>Name</th><th>Taken</th><th>Holds</th><th>Shape</th><th></th></tr></thead><tbody>
      ${snaps.map(
        (
          s,
        ) => html`<tr data-test=${`snapshot-${s.name}`}><td>${s.name}${s.description ? html` <span class="muted">${s.description}</span>` : null}</td>
        <td>${when(s.created_at)}</td><td>${s.memory ? 'disk and memory' : 'disk'}</td><td>${s.cpus} CPU, ${s.memory_mb} MB, ${s.disk_gb} GB</td>
        <td><button type="button" class="small" disabled=${busy !== undefined} data-test=${`revert-${s.name}`} onClick=${() => setAsking(s.name)}>revert</button>
        <button type="button" class="small" disabled=${busy !== undefined} onClick=${() => run('delete', () => api('DELETE', `/vms/${enc(vm.name)}/snapshots/${enc(s.name)}`))}>delete</button></td></tr>`,
      )}
    </tbody></table>`
    }
    <form class="row" onSubmit=${take}>
      <label>Name <input name="snapshot" placeholder="snap-N" value=${name} onInput=${(e: Event) => setName((e.target as HTMLInputElement).value)} /></label>
      <button type="submit" disabled=${busy !== undefined || vm.status === 'creating'} data-test="snapshot-take">${busy === 'take' ? 'taking…' : 'Take snapshot'}</button>
    </form>
    ${warning ? html`<span class="warning" role="status">${warning}</span>` : null}
    <${ErrorLine} error=${error ?? list.error} />
    ${
      asking
        ? html`<${Confirm} title=${`Revert ${vm.name} to ${asking}?`} action="Revert" danger=${true}
        body=${html`<p>Everything the VM did since the snapshot is lost${vm.status === 'running' || vm.status === 'paused' ? '; its guest is stopped at once' : ''}.</p>`}
        onCancel=${() => setAsking(undefined)}
        onConfirm=${() => {
          const snap = asking;
          setAsking(undefined);
          void run('revert', () => api('POST', `/vms/${enc(vm.name)}/snapshots/${enc(snap)}/revert`));
        }} />`
        : null
    }
  </section>`;
}
