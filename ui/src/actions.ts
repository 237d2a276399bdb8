import { useState } from 'preact/hooks';
import { api, enc, type Instance, type NodeView } from './api.js';
import { Confirm, html, useAction } from './ui.js';

/** The lifecycle verbs a VM in this state accepts (the daemon checks again). */
export function verbsFor(vm: Instance): string[] {
  switch (vm.status) {
    case 'running':
      return ['shutdown', 'pause', ...(vm.persistent ? ['suspend'] : []), 'fork'];
    case 'paused':
      return ['resume', 'shutdown', 'fork'];
    case 'suspended':
      return ['restore', 'clone'];
    case 'stopped':
      return ['start', 'clone'];
    case 'error':
      return vm.persistent ? ['start'] : [];
    default:
      return [];
  }
}

/** On a node of a cluster (the VM names its node): may it move, as it is now? A running or paused one is suspended for it. */
export function movable(vm: Instance & { node?: string }): boolean {
  const live = vm.status === 'running' || vm.status === 'paused';
  return !!vm.node && (vm.status === 'stopped' || vm.status === 'suspended' || (live && vm.persistent));
}

/** The nodes a VM may be moved to: the ready ones that are not drained, but its own. */
export function moveTargets(nodes: NodeView[], from: string | undefined): string[] {
  return nodes.filter((n) => n.state === 'ready' && !n.draining && n.node !== from).map((n) => n.node);
}

/**
 * The buttons for a VM's lifecycle: each verb posts to the daemon; the list and page update from
 * the change feed, not from the answer. Delete, clone and fork ask first.
 */
export function VmActions({ vm, onDeleted }: { vm: Instance & { node?: string }; onDeleted?: () => void }) {
  // `warning`: what the daemon says of a verb that worked but not as asked (a restore or a clone that cold-booted)
  const { busy, error, warning, run } = useAction();
  const [asking, setAsking] = useState<'delete' | 'clone' | 'fork' | 'move'>();
  const [targets, setTargets] = useState<string[]>([]);
  const [moveTo, setMoveTo] = useState('');
  const [cloneName, setCloneName] = useState('');
  const [forks, setForks] = useState('1');
  const [forkNames, setForkNames] = useState('');
  const [forkKept, setForkKept] = useState(false);
  const [forkTags, setForkTags] = useState('');
  const verb = (v: string) => run(v, () => api('POST', `/vms/${enc(vm.name)}/${v}`));
  return html`<div class="actions" data-test=${`actions-${vm.name}`}>
    ${verbsFor(vm).map(
      (v) => html`<button type="button" disabled=${busy !== undefined} data-test=${`do-${v}`}
      onClick=${() => (v === 'clone' || v === 'fork' ? setAsking(v) : verb(v))}>${busy === v ? `${v}…` : v}</button>`,
    )}
    ${
      movable(vm)
        ? html`<button type="button" disabled=${busy !== undefined} data-test="do-move" onClick=${() =>
            run('move', async () => {
              const list = moveTargets(await api<NodeView[]>('GET', '/nodes'), vm.node);
              if (!list.length) throw new Error('no other node is ready to take it');
              setTargets(list);
              setMoveTo(list[0]);
              setAsking('move');
            })}>${busy === 'move' ? 'move…' : 'move'}</button>`
        : null
    }
    <button type="button" class="danger" disabled=${busy !== undefined} data-test="do-delete" onClick=${() => setAsking('delete')}>${busy === 'delete' ? 'deleting…' : 'delete'}</button>
    ${error ? html`<span class="error" role="alert">${error}</span>` : null}
    ${warning ? html`<span class="warning" role="status" data-test="warning">${warning}</span>` : null}
    ${
      asking === 'delete'
        ? html`<${Confirm} title=${`Delete ${vm.name}?`} action="Delete" danger=${true}
        body=${html`<p>The VM and its disk are removed for good.</p>`}
        onCancel=${() => setAsking(undefined)}
        onConfirm=${() => {
          setAsking(undefined);
          void run('delete', () => api('DELETE', `/vms/${enc(vm.name)}`)).then(() => onDeleted?.());
        }} />`
        : null
    }
    ${
      asking === 'clone'
        ? html`<${Confirm} title=${`Clone ${vm.name}`} action="Clone"
        body=${html`<label>Name of the clone <input value=${cloneName} onInput=${(e: Event) => setCloneName((e.target as HTMLInputElement).value)} placeholder="leave empty for a generated name" /></label>`}
        onCancel=${() => setAsking(undefined)}
        onConfirm=${() => {
          setAsking(undefined);
          void run('clone', () =>
            api('POST', `/vms/${enc(vm.name)}/clone`, { body: cloneName ? { name: cloneName } : {} }),
          );
        }} />`
        : null
    }
    ${
      asking === 'move'
        ? html`<${Confirm} title=${`Move ${vm.name}`} action="Move"
        body=${html`<p>${vm.name} goes to another node with its disk${vm.status === 'running' ? ', suspended for the move and restored there' : vm.status === 'paused' ? ', suspended for the move, restored there and paused again' : ''}.</p>
          <label>To node <select data-test="move-node" value=${moveTo} onChange=${(e: Event) => setMoveTo((e.target as HTMLSelectElement).value)}>
            ${targets.map((t) => html`<option value=${t}>${t}</option>`)}
          </select></label>`}
        onCancel=${() => setAsking(undefined)}
        onConfirm=${() => {
          setAsking(undefined);
          void run('move', () => api('POST', `/vms/${enc(vm.name)}/move`, { body: { node: moveTo } }));
        }} />`
        : null
    }
    ${
      asking === 'fork'
        ? html`<${Confirm} title=${`Fork ${vm.name}`} action="Fork"
        body=${html`<p>Copies of ${vm.name} as it is now, each its own machine; ${vm.name} is held for a moment and runs on.</p>
          <label>How many <input type="number" min="1" max="100" data-test="fork-count" value=${forks} onInput=${(e: Event) => setForks((e.target as HTMLInputElement).value)} /></label>
          <label>Names <input data-test="fork-names" value=${forkNames} onInput=${(e: Event) => setForkNames((e.target as HTMLInputElement).value)} placeholder=${`leave empty for ${vm.name}-fork-N`} /></label>
          <label>Tags <input data-test="fork-tags" value=${forkTags} onInput=${(e: Event) => setForkTags((e.target as HTMLInputElement).value)} placeholder="key=value, another=value" /></label>
          <label><input type="checkbox" data-test="fork-persistent" checked=${forkKept} onChange=${(e: Event) => setForkKept((e.target as HTMLInputElement).checked)} /> persistent (kept across restarts, can be suspended)</label>`}
        onCancel=${() => setAsking(undefined)}
        onConfirm=${() => {
          setAsking(undefined);
          void run('fork', () =>
            api('POST', `/vms/${enc(vm.name)}/fork`, { body: forkBody(forks, forkNames, forkKept, forkTags) }),
          );
        }} />`
        : null
    }
  </div>`;
}

/**
 * The body of a fork asked for in the dialog: the names given (comma- or space-separated; their
 * number is the count), else the count; `persistent` when ticked; the tags given as `key=value`
 * pairs (comma- or space-separated), which every fork carries. A pair without `=` is refused here;
 * the daemon checks every field.
 */
export function forkBody(count: string, names: string, persistent: boolean, tags = ''): Record<string, unknown> {
  const list = names.split(/[\s,]+/).filter(Boolean);
  const pairs = tags
    .split(/[\s,]+/)
    .filter(Boolean)
    .map((p) => ({ p, at: p.indexOf('=') }));
  const bad = pairs.find((x) => x.at < 1);
  if (bad) throw new Error(`tag ${bad.p}: write it as key=value`);
  return {
    ...(list.length ? { names: list } : { count: Number(count) }),
    ...(persistent ? { persistent: true } : {}),
    ...(pairs.length ? { tags: Object.fromEntries(pairs.map(({ p, at }) => [p.slice(0, at), p.slice(at + 1)])) } : {}),
  };
}
