import { useState } from 'preact/hooks';
import { api, enc, type Instance } from './api.js';
import { ErrorLine, html, message } from './ui.js';

/**
 * A stopped VM's CPUs, memory and disk, changed for its next boot (PATCH /vms/{name}; a disk only
 * grows). The daemon's words come back as they are when it refuses. The page shows the VM's new
 * fields through the change feed.
 */
export function ShapeEditor({ vm }: { vm: Instance }) {
  const [cpus, setCpus] = useState(String(vm.cpus));
  const [memory, setMemory] = useState(String(vm.memory_mb));
  const [disk, setDisk] = useState(String(vm.disk_gb));
  const [error, setError] = useState<string>();
  const [saved, setSaved] = useState(false);
  const save = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setSaved(false);
    try {
      await api('PATCH', `/vms/${enc(vm.name)}`, {
        body: { cpus: Number(cpus), memory_mb: Number(memory), disk_gb: Number(disk) },
      });
      setSaved(true);
    } catch (err) {
      setError(message(err));
    }
  };
  const field = (label: string, name: string, value: string, set: (v: string) => void, min: number) =>
    html`<label>${label} <input name=${name} type="number" min=${min} required value=${value} onInput=${(e: Event) => set((e.target as HTMLInputElement).value)} /></label>`;
  return html`<section class="card" data-test="shape">
    <h3>Machine</h3>
    <p class="muted">Changes take effect at its next start. A disk only grows.</p>
    <form class="row" onSubmit=${save}>
      ${field('CPUs', 'cpus', cpus, setCpus, 1)}
      ${field('Memory (MB)', 'memory_mb', memory, setMemory, 64)}
      ${field('Disk (GB)', 'disk_gb', disk, setDisk, vm.disk_gb)}
      <button type="submit" data-test="shape-save">Save</button>
      ${saved ? html`<span class="muted" data-test="shape-saved">saved</span>` : null}
    </form>
    <${ErrorLine} error=${error} />
  </section>`;
}
