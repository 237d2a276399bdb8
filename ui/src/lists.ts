import { api } from './api.js';
import { bytes, ErrorLine, html, useLoad, when } from './ui.js';

interface Image {
  id: string;
  os: string;
  description: string;
  size_bytes: number;
  created_at: string;
  agent_ready: boolean;
  boot: string;
  source: string;
  built?: boolean;
  in_use_by: string[];
}
interface Secret {
  name: string;
  size: number;
  mode: string;
  created_at: string;
  updated_at: string;
}
interface Activity {
  id: number;
  t: string;
  action: string;
  target: string;
  status: string;
  duration_ms: number;
  message?: string;
}

export function Images() {
  const l = useLoad(() => api<Image[]>('GET', '/images'), [], 10_000);
  return html`<section class="card"><h2>Images</h2><${ErrorLine} error=${l.error} />
    <table data-test="images"><thead><tr><th>Image</th><th>OS</th><th>Description</th><th>Size</th><th>Boot</th><th>Agent</th><th>Built</th><th>Used by</th></tr></thead>
    <tbody>${(l.data ?? []).map(
      (
        i,
      ) => html`<tr><td>${i.id}</td><td>${i.os}</td><td>${i.description}</td><td>${bytes(i.size_bytes)}</td><td>${i.boot}</td>
      <td>${i.agent_ready ? 'yes' : 'no'}</td><td>${i.built === false ? 'no' : when(i.created_at)}</td><td>${i.in_use_by.join(', ')}</td></tr>`,
    )}</tbody></table>
  </section>`;
}

/** Host secrets: names and metadata only; the API never returns values and neither does this page. */
export function Secrets() {
  const l = useLoad(() => api<Secret[]>('GET', '/secrets'), [], 10_000);
  return html`<section class="card"><h2>Host secrets</h2><p class="muted">Names only: values never leave the daemon except into a guest.</p><${ErrorLine} error=${l.error} />
    <table data-test="secrets"><thead><tr><th>Name</th><th>Size</th><th>Mode</th><th>Updated</th></tr></thead>
    <tbody>${(l.data ?? []).map((s) => html`<tr><td>${s.name}</td><td>${bytes(s.size)}</td><td><code>${s.mode}</code></td><td>${when(s.updated_at)}</td></tr>`)}</tbody></table>
  </section>`;
}

export function ActivityLog() {
  const l = useLoad(() => api<{ events: Activity[] }>('GET', '/activity?limit=200'), [], 5000);
  return html`<section class="card"><h2>Activity</h2><${ErrorLine} error=${l.error} />
    <table data-test="activity"><thead><tr><th>Time</th><th>Action</th><th>Target</th><th>Status</th><th>Took</th><th>Message</th></tr></thead>
    <tbody>${(l.data?.events ?? []).map(
      (
        e,
      ) => html`<tr class=${e.status === 'error' ? 'bad' : ''}><td>${when(e.t)}</td><td>${e.action}</td><td>${e.target}</td><td>${e.status}</td>
      <td>${e.duration_ms} ms</td><td>${e.message ?? ''}</td></tr>`,
    )}</tbody></table>
  </section>`;
}
