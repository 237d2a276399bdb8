import { useState } from 'preact/hooks';
import { api, enc, type DrainResult, type NodeView } from './api.js';
import { Confirm, ErrorLine, html, useAction, useLoad } from './ui.js';

/** "used/offered" of one figure of a node's capacity. */
const of = (used: number, offered: number, unit = '') => `${used}${unit}/${offered}${unit}`;

/**
 * The nodes of the cluster (docs/cluster.md): state, drain, room taken of each figure, tags. A
 * node is drained from here (its VMs moved to the others, what stays said with its reason) and
 * its drain ended. Shown only where `GET /nodes` answers: on a node of a cluster.
 */
export function Nodes() {
  const l = useLoad(() => api<NodeView[]>('GET', '/nodes'), [], 3000);
  const { busy, error, run } = useAction();
  const [asking, setAsking] = useState<string>();
  const [drained, setDrained] = useState<DrainResult>();
  const drain = (node: string) =>
    run(node, async () => setDrained(await api<DrainResult>('POST', `/nodes/${enc(node)}/drain`))).then(l.reload);
  const undrain = (node: string) =>
    run(node, async () => {
      setDrained(undefined);
      await api('DELETE', `/nodes/${enc(node)}/drain`);
    }).then(l.reload);
  return html`<section class="card"><h2>Nodes</h2><${ErrorLine} error=${l.error ?? error} />
    <table data-test="nodes"><thead><tr><th>Node</th><th>State</th><th>VMs</th><th>CPUs</th><th>Memory</th><th>Disk</th><th>Hypervisor</th><th>Tags</th><th>Actions</th></tr></thead>
    <tbody>${(l.data ?? []).map(
      (n) => html`<tr data-node=${n.node}>
      <td>${n.node}</td>
      <td data-test="state">${n.state}${n.draining ? ', drained' : ''}</td>
      <td>${of(n.allocated.vms, n.capacity.vm_slots)}</td><td>${of(n.allocated.cpus, n.capacity.cpus)}</td>
      <td>${of(n.allocated.memory_mb, n.capacity.memory_mb, ' MB')}</td><td>${of(n.allocated.disk_gb, n.capacity.disk_gb, ' GB')}</td>
      <td>${n.hypervisor}${n.accel ? ` (${n.accel})` : ''}</td>
      <td>${Object.entries(n.tags)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ')}</td>
      <td>${
        n.draining
          ? html`<button type="button" disabled=${busy !== undefined} data-test="do-undrain" onClick=${() => undrain(n.node)}>${busy === n.node ? 'undrain…' : 'undrain'}</button>`
          : html`<button type="button" disabled=${busy !== undefined || n.state !== 'ready'} data-test="do-drain" onClick=${() => setAsking(n.node)}>${busy === n.node ? 'drain…' : 'drain'}</button>`
      }</td>
    </tr>`,
    )}</tbody></table>
    ${drained ? html`<${DrainReport} result=${drained} />` : null}
    ${
      asking
        ? html`<${Confirm} title=${`Drain ${asking}?`} action="Drain"
        body=${html`<p>Nothing new is placed on ${asking}, and its VMs go to the other nodes: running and paused ones are suspended for the move and restored there (paused ones paused again). What cannot move stays, with its reason.</p>`}
        onCancel=${() => setAsking(undefined)}
        onConfirm=${() => {
          const node = asking;
          setAsking(undefined);
          void drain(node);
        }} />`
        : null
    }
  </section>`;
}

/** What the last drain did: each VM moved and where, each kept and why. */
function DrainReport({ result }: { result: DrainResult }) {
  return html`<div class="progress" data-test="drain-result" aria-live="polite">
    <p>Drained ${result.node}: ${result.moved.length} moved, ${result.refused.length} stayed.</p>
    <ul>
      ${result.moved.map((m) => html`<li data-test="moved">${m.name} to ${m.node}${m.warning ? html` <span class="warning">${m.warning}</span>` : null}</li>`)}
      ${result.refused.map((r) => html`<li data-test="stayed">${r.name} stayed: ${r.reason}</li>`)}
    </ul>
  </div>`;
}
