import { useState } from 'preact/hooks';
import { api, enc, type EgressEvent, type EgressPolicy, type EgressSecretBinding } from './api.js';
import { bytes, ErrorLine, html, useLoad, when } from './ui.js';

const lines = (text: string) =>
  text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);

function where(e: EgressEvent): string {
  const target = e.addr === 'host' ? 'host.svc.internal' : e.addr;
  const at = target ? `${target}${e.port ? `:${e.port}` : ''}` : '';
  if (!at) return e.name ?? '';
  return e.name && e.name !== target ? `${e.name} (${at})` : at;
}

/**
 * A VM's egress: its policy, editable (one rule a line; saved live, the daemon checks it), and its
 * latest decisions, refreshed every few seconds.
 */
export function Egress({ name }: { name: string }) {
  const policy = useLoad(() => api<EgressPolicy>('GET', `/vms/${enc(name)}/egress`), [name]);
  const log = useLoad(
    () => api<{ events: EgressEvent[] }>('GET', `/vms/${enc(name)}/egress/log?limit=50`),
    [name],
    3000,
  );
  const secrets = useLoad(() => api<EgressSecretBinding[]>('GET', `/vms/${enc(name)}/egress/secrets`), [name]);
  const [draft, setDraft] = useState<{ default: string; allow: string; deny: string }>();
  const [error, setError] = useState<string>();
  const [saved, setSaved] = useState(false);
  const p = policy.data;
  const form = draft ?? (p ? { default: p.default, allow: p.allow.join('\n'), deny: p.deny.join('\n') } : undefined);
  const save = async (e: Event) => {
    e.preventDefault();
    if (!form) return;
    setError(undefined);
    setSaved(false);
    try {
      await api('PUT', `/vms/${enc(name)}/egress`, {
        body: { default: form.default, allow: lines(form.allow), deny: lines(form.deny) },
      });
      setDraft(undefined);
      setSaved(true);
      policy.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const set = (k: 'default' | 'allow' | 'deny') => (ev: Event) =>
    form && setDraft({ ...form, [k]: (ev.target as HTMLInputElement).value });
  const events = [...(log.data?.events ?? [])].reverse();
  return html`<section class="card" data-test="egress">
    <h3>Egress</h3>
    <p class="muted">What this VM may reach. Rules, one a line: a domain (<code>pypi.org</code>, <code>*.github.com</code>), an IP or CIDR with an optional <code>:port</code>, or <code>host:PORT</code> for a port on this host (the guest calls it <code>host.svc.internal</code>). Deny rules win.</p>
    ${
      form
        ? html`<form onSubmit=${save}>
      <label>Default <select name="egress_default" value=${form.default} onChange=${set('default')}><option value="allow">allow</option><option value="deny">deny</option></select></label>
      <div class="row">
        <label>Allow <textarea name="egress_allow" rows="4" value=${form.allow} onInput=${set('allow')}></textarea></label>
        <label>Deny <textarea name="egress_deny" rows="4" value=${form.deny} onInput=${set('deny')}></textarea></label>
      </div>
      <button type="submit" data-test="egress-save">Save policy</button> ${saved ? html`<span class="muted" data-test="egress-saved">saved: in force now</span>` : null}
    </form>`
        : null
    }
    <${ErrorLine} error=${error ?? policy.error} />
    <h4>Egress secrets</h4>
    ${
      (secrets.data ?? []).length === 0
        ? html`<p class="muted">None. A host secret bound here never enters the VM: its programs hold a placeholder, and requests to the secret's hosts get the value on the way out (<code>svc egress secrets</code>).</p>`
        : html`<table data-test="egress-secrets"><thead><tr><th>Secret</th><th>Hosts</th><th>Variable</th><th>Header</th><th>Placeholder</th></tr></thead><tbody>
      ${(secrets.data ?? []).map(
        (b) =>
          html`<tr><td>${b.secret}</td><td>${b.hosts.join(', ')}</td><td><code>${b.env ?? b.secret.toUpperCase().replace(/[^A-Z0-9_]/g, '_')}</code></td><td>${b.header ? `${b.header}${b.format ? `: ${b.format}` : ''}` : 'any'}</td><td><code>${b.placeholder}</code></td></tr>`,
      )}
    </tbody></table>`
    }
    <${ErrorLine} error=${secrets.error} />
    <h4>Latest decisions</h4>
    ${
      events.length === 0
        ? html`<p class="muted">Nothing yet.</p>`
        : html`<table data-test="egress-log"><thead><tr><th>Time</th><th>Event</th><th>What</th><th>Rule</th><th>Traffic</th></tr></thead><tbody>
      ${events.map(
        (
          e,
        ) => html`<tr class=${e.decision === 'deny' ? 'bad' : ''}><td>${when(e.t)}</td><td>${e.event} ${e.proto}</td><td>${where(e)}</td><td><code>${e.rule}</code>${e.secret ? html` <code>${e.secret}</code>` : null}</td>
        <td>${e.event === 'close' ? `${bytes(e.bytes_out ?? 0)} out, ${bytes(e.bytes_in ?? 0)} in` : (e.answers ?? []).join(', ')}${e.repeats ? ` (+${e.repeats})` : ''}</td></tr>`,
      )}
    </tbody></table>`
    }
    <${ErrorLine} error=${log.error} />
  </section>`;
}
