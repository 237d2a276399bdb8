import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, onUnauthenticated, session } from './api.js';
import { feed } from './feed.js';
import { ActivityLog, Images, Secrets } from './lists.js';
import { Nodes } from './nodes.js';
import { VmList } from './vm-list.js';
import { VmPage } from './vm-page.js';
import { ErrorLine, html, message, useLoad } from './ui.js';
import './style.css';

interface Session {
  token_required: boolean;
  authenticated: boolean;
}

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return hash;
}

/** The token, asked once; the daemon answers with a session the page keeps in its origin's storage. */
function Login({ onDone }: { onDone: () => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string>();
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      const r = await api<{ session?: string }>('POST', '/ui/session', { body: { token } });
      if (r.session) session.set(r.session);
      onDone();
    } catch (err) {
      setError(message(err));
    }
  };
  return html`<main class="login"><form class="card" onSubmit=${submit} data-test="login">
    <h1>svc</h1>
    <label>API token <input type="password" autocomplete="current-password" value=${token} autofocus required
      onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} data-test="token" /></label>
    <button type="submit" class="primary" data-test="login-submit">Log in</button>
    <${ErrorLine} error=${error} />
  </form></main>`;
}

function App() {
  const [state, setSession] = useState<Session>();
  const [error, setError] = useState<string>();
  const hash = useHash();
  const check = () => api<Session>('GET', '/ui/session').then(setSession, (err) => setError(message(err)));
  // A node of a cluster has nodes to show (`GET /nodes` answers only there), asked once logged in.
  const cluster = useLoad(
    () =>
      state?.authenticated
        ? api('GET', '/nodes').then(
            () => true,
            () => false,
          )
        : Promise.resolve(false),
    [state?.authenticated],
  ).data;
  useEffect(() => {
    void check();
    return onUnauthenticated(() => {
      feed.stop();
      setSession((s) => (s ? { ...s, authenticated: false } : s));
    });
  }, []);
  if (error) return html`<main><${ErrorLine} error=${error} /></main>`;
  if (!state) return html`<main><p class="boot">Loading svc…</p></main>`;
  if (!state.authenticated) return html`<${Login} onDone=${check} />`;
  const logout = async () => {
    feed.stop();
    await api('DELETE', '/ui/session').catch(() => undefined);
    session.clear();
    void check();
  };
  const parts = hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const page = parts[0] || 'vms';
  const nav = [
    ['vms', '#/', 'VMs'],
    ['images', '#/images', 'Images'],
    ['secrets', '#/secrets', 'Secrets'],
    ['activity', '#/activity', 'Activity'],
    ...(cluster ? [['nodes', '#/nodes', 'Nodes']] : []),
  ];
  const current = page === 'vm' ? 'vms' : page;
  return html`<div class="app">
    <header>
      <a class="brand" href="#/">svc</a>
      <nav aria-label="main">${nav.map(([id, href, label]) => html`<a href=${href} class=${current === id ? 'on' : ''} aria-current=${current === id ? 'page' : undefined}>${label}</a>`)}</nav>
      ${state.token_required ? html`<button type="button" class="logout" onClick=${logout} data-test="logout">Log out</button>` : null}
    </header>
    <main>
      ${
        page === 'vm' && parts[1]
          ? html`<${VmPage} name=${parts[1]} tab=${parts[2] || 'overview'} />`
          : page === 'images'
            ? html`<${Images} />`
            : page === 'secrets'
              ? html`<${Secrets} />`
              : page === 'activity'
                ? html`<${ActivityLog} />`
                : page === 'nodes'
                  ? html`<${Nodes} />`
                  : html`<${VmList} />`
      }
    </main>
  </div>`;
}

const root = document.getElementById('app')!;
root.textContent = '';
render(html`<${App} />`, root);
