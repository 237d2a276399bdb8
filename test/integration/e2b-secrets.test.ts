import { expect } from 'chai';
import { Sandbox, Secret, SecretNotFoundError } from 'e2b';
import { call } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { e2bOptions } from '../helpers/e2b.js';
import type { EgressSecretBinding } from '../../src/domain/egress-secrets.js';
import { SecretStore } from '../../src/ports/stores.js';

/**
 * E2B's secrets through the official SDK (`Secret`), and their use in a sandbox's network rules
 * (`Secret.fill`), against svcd on the fake hypervisor. That the header goes out on a real guest's
 * requests is tested on QEMU (qemu-egress-secrets.test.ts).
 */
describe('E2B API: secrets with the official SDK, named in network rules', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  const opts = () => e2bOptions(d);
  const stored = async (name: string) =>
    (await d.daemon.container.get<SecretStore>(SecretStore).get(name)).value.toString();
  const bindings = async (vm: string) =>
    ((await d.call('GET', `/vms/${vm}`)).json as { egress_secrets: EgressSecretBinding[] }).egress_secrets;

  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
  });
  after(async () => d.stop());

  it('keeps secrets: create, list, getInfo by id or name, update (a new version), destroy; the value never answered', async () => {
    const s = await Secret.create('openai', 'sk-team-1', { ...opts(), metadata: { team: 'a' } });
    expect(s).to.include({ name: 'openai', version: 1 });
    expect(s.secretId).to.match(/^sec-[0-9a-f]{12}$/);
    expect(s.metadata).to.deep.equal({ team: 'a' });
    expect((await Secret.getInfo('openai', opts())).secretId).to.equal(s.secretId);
    expect(await Secret.exists(s.secretId, opts())).to.equal(true);
    expect(await Secret.exists('nope', opts())).to.equal(false);
    const listed = await Secret.list(opts()).nextItems();
    expect(listed.map((x) => x.name)).to.deep.equal(['openai']);
    const twice = await Secret.create('openai', 'x', opts()).catch((e: unknown) => e);
    expect((twice as Error).message).to.match(/secret openai exists/);
    const v2 = await Secret.update('openai', 'sk-team-2', opts());
    expect(v2.version).to.equal(2);
    expect(v2.metadata, 'metadata kept when not given').to.deep.equal({ team: 'a' });
    expect(await stored(`e2bsec.${s.secretId.slice(4)}`)).to.equal('sk-team-2');
    const key = { 'x-api-key': d.tcp.token ?? '' };
    const all = await call({ port: d.tcp.port }, 'GET', '/e2b/secrets', undefined, key);
    expect(all.text).to.not.include('sk-team');
    for (const [body, why] of [
      [{ name: 'a{b}', value: 'x' }, /secret name/],
      [{ name: 'ok', value: '' }, /one line of 1 to/],
      [{ name: 'ok', value: 'two\nlines' }, /one line/],
      [{ name: 'ok', value: 'x', metadata: { k: 5 } }, /metadata/],
    ] as const) {
      const r = await call({ port: d.tcp.port }, 'POST', '/e2b/secrets', body, key);
      expect(r.status, JSON.stringify(body)).to.equal(400);
      expect(r.json.message).to.match(why);
    }
    const missing = await Secret.update('nope', 'x', opts()).catch((e: unknown) => e);
    expect(missing).to.be.instanceOf(SecretNotFoundError);
    const gone = await Secret.create('gone', 'x', opts());
    expect(await Secret.destroy(gone.secretId, opts())).to.equal(true);
    expect(await Secret.destroy(gone.secretId, opts())).to.equal(false);
  });

  it("puts a secret in a rule's header (the text around Secret.fill its format) and the sandbox id in another; refuses to delete a secret in use", async () => {
    await Secret.create('other', 'k-other', opts());
    const s = await Sandbox.create({
      ...opts(),
      network: {
        allowOut: ['api.example.com'],
        rules: {
          'api.example.com': [
            {
              transform: {
                headers: { Authorization: `Bearer ${Secret.fill('openai')}`, 'X-Key': Secret.fill('other') },
              },
            },
          ],
          'log.example.com': [{ transform: { headers: { 'X-Sandbox': 'sbx=${e2b.sandboxId}' } } }],
        },
      },
    });
    try {
      const team = `e2bsec.${(await Secret.getInfo('openai', opts())).secretId.slice(4)}`;
      const other = `e2bsec.${(await Secret.getInfo('other', opts())).secretId.slice(4)}`;
      const b = await bindings(s.sandboxId);
      expect(
        b.map(({ secret, hosts, header, format, always }) => ({ secret, hosts, header, format, always })),
      ).to.deep.equal([
        { secret: team, hosts: ['api.example.com'], header: 'Authorization', format: 'Bearer {value}', always: true },
        { secret: other, hosts: ['api.example.com'], header: 'X-Key', format: undefined, always: true },
        { secret: b[2].secret, hosts: ['log.example.com'], header: 'X-Sandbox', format: undefined, always: true },
      ]);
      expect(await stored(b[2].secret)).to.equal(`sbx=${s.sandboxId}`);
      expect(Object.keys((await s.getInfo()).network?.rules ?? {}).sort()).to.deep.equal([
        'api.example.com',
        'log.example.com',
      ]);
      const busy = await Secret.destroy('openai', opts()).catch((e: unknown) => e);
      expect((busy as Error).message).to.match(new RegExp(`in the network rules of ${s.sandboxId}`));
      // a rule may name one secret per header, and only one that exists
      for (const [headers, why] of [
        [{ A: `${Secret.fill('openai')}:${Secret.fill('openai')}` }, /a header takes one secret/],
        [{ A: Secret.fill('no-such') }, /no secret named "no-such"/],
        [{ A: Secret.fill('openai'), B: Secret.fill('openai') }, /secret "openai" is named in two headers/],
      ] as const) {
        const err = await Sandbox.create({
          ...opts(),
          network: { rules: { 'x.example.com': [{ transform: { headers } }] } },
        }).catch((e: unknown) => e);
        expect((err as Error).message).to.match(why);
      }
      // the rules replaced: the team secret's binding goes with them, the secret stays
      await s.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { A: 'plain' } } }] } });
      expect((await bindings(s.sandboxId)).map((x) => x.secret)).to.not.include(team);
      expect(await Secret.exists('openai', opts())).to.equal(true);
    } finally {
      await s.kill();
    }
    expect(await Secret.destroy('openai', opts())).to.equal(true);
  });
});
