import { expect } from 'chai';
import type { InMemoryGuestAgent } from '../../src/adapters/hypervisor/fake/in-memory-guest-agent.js';
import type { InMemoryGuestNetwork } from '../../src/adapters/guest-net/in-memory-guest-network.js';
import type { EgressSecretBinding } from '../../src/domain/egress-secrets.js';
import { GuestAgent } from '../../src/ports/guest-agent.js';
import { GuestNetwork } from '../../src/ports/guest-network.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

/** The API of egress secrets (docs/egress-secrets.md), on the fake hypervisor. */
describe('egress secrets: the API (fake hypervisor)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  let agent: InMemoryGuestAgent;
  let network: InMemoryGuestNetwork;
  const binding = { secret: 'openai', hosts: ['api.openai.com', '*.openai.com'], env: 'OPENAI_API_KEY' };

  before(async () => {
    d = await startTestDaemon({ max_vms: 10 });
    agent = d.daemon.container.get<InMemoryGuestAgent>(GuestAgent);
    network = d.daemon.container.get<InMemoryGuestNetwork>(GuestNetwork);
    expect((await d.call('POST', '/secrets', { name: 'openai', value: 'sk-never-shown' })).status).to.equal(200);
    expect((await d.call('POST', '/secrets', { name: 'github', value: 'ghp-never-shown' })).status).to.equal(200);
  });
  after(async () => d.stop());

  it('refuses bad bindings and unknown secrets with 400, and leaves nothing behind', async () => {
    const bad: [unknown, RegExp][] = [
      [[{ secret: 'nope', hosts: ['x.com'] }], /there is no host secret nope/],
      [[{ secret: 'openai', hosts: [] }], /hosts must be a list of 1 to 64/],
      [[{ secret: 'openai', hosts: ['x.com:443'] }], /is not a domain name/],
      [[{ secret: 'openai', hosts: ['10.0.0.1'] }], /is not a domain name/],
      [[{ secret: 'openai', hosts: ['x.com'], header: 'Host' }], /Host cannot carry a secret/],
      [[{ secret: 'openai', hosts: ['x.com'], format: 'Bearer {value}' }], /format needs a header/],
      [[{ secret: 'openai', hosts: ['x.com'], header: 'Authorization', format: 'Bearer' }], /with \{value\} in it/],
      [[{ secret: 'openai', hosts: ['x.com'], env: '1X' }], /env must be an environment variable name/],
      [[binding, binding], /secret openai is bound twice/],
      [[{ secret: 'openai', hosts: ['x.com'], placeholder: 'mine' }], /unknown field "placeholder"/],
      ['openai', /must be a list/],
    ];
    for (const [egress_secrets, why] of bad) {
      const r = await d.call('POST', '/vms', { name: 'bad', egress_secrets });
      expect(r.status, r.text).to.equal(400);
      expect(r.json.error).to.match(why);
    }
    expect((await d.call('GET', '/vms/bad')).status).to.equal(404);
  });

  it('gives a VM its bindings: placeholders in the record and the guest, the network told, never the value', async () => {
    const r = await d.call('POST', '/vms', { name: 'a', persistent: true, egress_secrets: [binding] });
    expect(r.status, r.text).to.equal(201);
    const [b] = r.json.egress_secrets as EgressSecretBinding[];
    expect(b).to.deep.include(binding);
    expect(b.placeholder).to.match(/^svc-egress-[0-9a-f]{40}$/);
    expect(network.secrets.get('a')).to.deep.equal([b]);
    const pushed = agent.egress.get('a')!.at(-1)!;
    expect(pushed.env).to.deep.equal({ OPENAI_API_KEY: b.placeholder });
    expect(pushed.ca_pem).to.include('BEGIN CERTIFICATE');
    expect((await d.call('GET', '/vms/a/egress/secrets')).json).to.deep.equal([b]);
    for (const path of ['/vms/a', '/vms', '/vms/a/egress/secrets', '/activity'])
      expect((await d.call('GET', path)).text, path).not.to.include('never-shown');
  });

  it('a PUT replaces them live: a secret kept keeps its placeholder, a new one gets its own, none takes them away', async () => {
    const before = (await d.call('GET', '/vms/a/egress/secrets')).json as EgressSecretBinding[];
    const r = await d.call('PUT', '/vms/a/egress/secrets', [
      { ...binding, header: 'Authorization', format: 'Bearer {value}' },
      { secret: 'github', hosts: ['api.github.com'] },
    ]);
    expect(r.status, r.text).to.equal(200);
    const [openai, github] = r.json as EgressSecretBinding[];
    expect(openai.placeholder).to.equal(before[0].placeholder);
    expect(openai).to.include({ header: 'Authorization', format: 'Bearer {value}' });
    expect(github.placeholder)
      .to.match(/^svc-egress-/)
      .and.not.equal(openai.placeholder);
    expect(agent.egress.get('a')!.at(-1)!.env).to.deep.equal({
      OPENAI_API_KEY: openai.placeholder,
      GITHUB: github.placeholder,
    });
    expect(network.secrets.get('a')).to.have.length(2);
    expect((await d.call('PUT', '/vms/a/egress/secrets', [{ secret: 'nope', hosts: ['x.com'] }])).status).to.equal(400);
    expect((await d.call('GET', '/vms/a/egress/secrets')).json, 'a refused PUT changes nothing').to.have.length(2);
    expect((await d.call('PUT', '/vms/nope/egress/secrets', [])).status).to.equal(404);
  });

  it('a clone takes its template bindings with placeholders of its own', async () => {
    const tpl = (await d.call('GET', '/vms/a/egress/secrets')).json as EgressSecretBinding[];
    expect((await d.call('POST', '/vms/a/suspend')).status).to.equal(200);
    const c = await d.call('POST', '/vms', { name: 'c', from: 'a' });
    expect(c.status, c.text).to.equal(201);
    const mine = c.json.egress_secrets as EgressSecretBinding[];
    expect(mine.map((b) => b.secret)).to.deep.equal(tpl.map((b) => b.secret));
    for (let i = 0; i < mine.length; i++) {
      expect(mine[i].placeholder).to.not.equal(tpl[i].placeholder);
      // The template's processes came along in the clone: their placeholder is still put in place.
      expect(mine[i].inherited).to.deep.equal([tpl[i].placeholder]);
    }
    expect(network.secrets.get('c')![0].inherited).to.deep.equal([tpl[0].placeholder]);
    expect(agent.egress.get('c')!.at(-1)!.env.OPENAI_API_KEY).to.equal(mine[0].placeholder);
    // The template, restored, is told its own again.
    expect((await d.call('POST', '/vms/a/restore')).status).to.equal(200);
    expect(agent.egress.get('a')!.at(-1)!.env.OPENAI_API_KEY).to.equal(tpl[0].placeholder);
    const off = await d.call('PUT', '/vms/c/egress/secrets', []);
    expect(off.json).to.deep.equal([]);
    expect(agent.egress.get('c')!.at(-1)).to.deep.equal({ ca_pem: undefined, env: {} });
    for (const vm of ['a', 'c']) await d.call('DELETE', `/vms/${vm}`);
  });
});
