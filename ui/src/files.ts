import { useState } from 'preact/hooks';
import { api, download, enc, type FsInfo } from './api.js';
import { bytes, Confirm, ErrorLine, html, message, useLoad, when } from './ui.js';

const join = (dir: string, name: string) => (dir.endsWith('/') ? dir + name : `${dir}/${name}`);
const parent = (dir: string) => dir.replace(/\/[^/]+\/?$/, '') || '/';

/** A file browser on the guest: list, open directories, download, upload, make a directory, remove. */
export function FileBrowser({ name }: { name: string }) {
  const [dir, setDir] = useState('/root');
  const [typed, setTyped] = useState('/root');
  const [error, setError] = useState<string>();
  const [newDir, setNewDir] = useState('');
  const [removing, setRemoving] = useState<FsInfo>();
  const [busy, setBusy] = useState(false);
  const list = useLoad(() => api<FsInfo[]>('GET', `/vms/${enc(name)}/fs/readdir?path=${enc(dir)}`), [name, dir]);
  const go = (d: string) => {
    setDir(d);
    setTyped(d);
    setError(undefined);
  };
  const act = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await fn();
      list.reload();
    } catch (err) {
      setError(message(err));
    } finally {
      setBusy(false);
    }
  };
  const upload = (e: Event) => {
    const input = e.target as HTMLInputElement;
    const files = [...(input.files ?? [])];
    void act(async () => {
      for (const f of files) await api('PUT', `/vms/${enc(name)}/cp?path=${enc(join(dir, f.name))}`, { raw: f });
    }).then(() => {
      input.value = '';
    });
  };
  const crumbs = dir.split('/').filter(Boolean);
  return html`<section class="card files" data-test="files" data-dir=${dir}>
    <form class="row" onSubmit=${(e: Event) => {
      e.preventDefault();
      // What the field holds now: the last keystroke's state may not have rendered yet (a fast Enter, a paste).
      const field = (e.currentTarget as HTMLFormElement).querySelector<HTMLInputElement>('[data-test=files-path]');
      go((field?.value ?? typed).trim() || '/');
    }}>
      <label class="grow">Path <input value=${typed} onInput=${(e: Event) => setTyped((e.target as HTMLInputElement).value)} data-test="files-path" /></label>
      <button type="submit">Open</button>
      <button type="button" onClick=${() => go(parent(dir))} disabled=${dir === '/'}>Up</button>
    </form>
    <nav class="crumbs" aria-label="path"><a href="#" onClick=${(e: Event) => {
      e.preventDefault();
      go('/');
    }}>/</a>${crumbs.map(
      (c, i) =>
        html`<a href="#" onClick=${(e: Event) => {
          e.preventDefault();
          go(`/${crumbs.slice(0, i + 1).join('/')}`);
        }}>${c}/</a>`,
    )}</nav>
    <div class="row tools">
      <label class="button">Upload <input type="file" multiple onChange=${upload} disabled=${busy} data-test="upload" /></label>
      <form class="row" onSubmit=${(e: Event) => {
        e.preventDefault();
        if (newDir.trim())
          void act(() => api('POST', `/vms/${enc(name)}/fs/mkdir`, { body: { path: join(dir, newDir.trim()) } })).then(
            () => setNewDir(''),
          );
      }}>
        <input placeholder="new directory" value=${newDir} onInput=${(e: Event) => setNewDir((e.target as HTMLInputElement).value)} data-test="mkdir-name" aria-label="new directory name" />
        <button type="submit" disabled=${busy} data-test="mkdir">Make directory</button>
      </form>
      ${busy ? html`<span class="muted">working…</span>` : null}
    </div>
    <${ErrorLine} error=${error ?? list.error} />
    <table class="listing" data-test="listing">
      <thead><tr><th>Name</th><th>Size</th><th>Mode</th><th>Modified</th><th></th></tr></thead>
      <tbody>${(list.data ?? []).map(
        (f) => html`<tr key=${f.name} data-file=${f.name}>
        <td>${
          f.type === 'directory'
            ? html`<a href="#" onClick=${(e: Event) => {
                e.preventDefault();
                go(join(dir, f.name));
              }}>${f.name}/</a>`
            : f.type === 'file'
              ? html`<a href=${`/vms/${enc(name)}/cp?path=${enc(join(dir, f.name))}`} download=${f.name} onClick=${(
                  e: Event,
                ) => {
                  e.preventDefault();
                  download((e.currentTarget as HTMLAnchorElement).getAttribute('href')!, f.name).catch((err) =>
                    setError(message(err)),
                  );
                }} data-test="download">${f.name}</a>`
              : html`<span>${f.name}${f.target ? html` <span class="muted">→ ${f.target}</span>` : null}</span>`
        }</td>
        <td>${f.type === 'file' ? bytes(f.size) : ''}</td><td><code>${f.mode}</code></td><td>${when(f.mtime)}</td>
        <td><button type="button" class="danger small" onClick=${() => setRemoving(f)} data-test="remove">remove</button></td>
      </tr>`,
      )}</tbody>
    </table>
    ${
      removing
        ? html`<${Confirm} title=${`Remove ${removing.name}?`} action="Remove" danger=${true}
      body=${html`<p>${join(dir, removing.name)}${removing.type === 'directory' ? ' and everything in it' : ''} is removed in the guest.</p>`}
      onCancel=${() => setRemoving(undefined)}
      onConfirm=${() => {
        const f = removing;
        setRemoving(undefined);
        void act(() =>
          api(
            'DELETE',
            `/vms/${enc(name)}/fs/remove?path=${enc(join(dir, f.name))}&recursive=${f.type === 'directory'}`,
          ),
        );
      }} />`
        : null
    }
  </section>`;
}
