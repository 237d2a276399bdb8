import { expect } from 'chai';
import { ndjson } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

describe('images API (fake hypervisor with real local agents)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
  });
  after(async () => d.stop());

  it('lists images, gets one by alias, and refuses bad names', async () => {
    const list = await d.call('GET', '/images');
    expect(list.status).to.equal(200);
    expect((list.json as { id: string }[]).map((i) => i.id)).to.include.members(['debian', 'minimal']);
    expect((await d.call('GET', '/images/default')).json).to.include({ id: 'debian', agent_ready: true });
    expect((await d.call('GET', '/images/NOPE')).status).to.equal(400);
    expect((await d.call('GET', '/images/nope')).status).to.equal(404);
  });

  it('bakes a stopped vm into an image that new vms boot from, and refuses a running one', async () => {
    expect((await d.call('POST', '/vms', { name: 'src', persistent: true })).status).to.equal(201);
    expect((await d.call('POST', '/images', { name: 'baked', from_vm: 'src' })).status).to.equal(400);
    await d.call('POST', '/vms/src/shutdown');
    const r = await d.call('POST', '/images?stream=1', { name: 'baked', from_vm: 'src' });
    const events = ndjson(r.text);
    expect(events.map((e) => e.phase)).to.deep.equal(['accepted', 'bake', 'ready']);
    expect(events.at(-1)!.image).to.include({ id: 'baked' });
    const vm = await d.call('POST', '/vms', { name: 'from-baked', image: 'baked' });
    expect(vm.status, vm.text).to.equal(201);
    expect(vm.json).to.include({ image: 'baked' });
    expect((await d.call('GET', '/images/baked')).json).to.deep.include({ in_use_by: ['from-baked'] });
    expect((await d.call('DELETE', '/images/baked')).status).to.equal(409);
    expect((await d.call('POST', '/images', { name: 'baked', from_vm: 'src' })).status).to.equal(409);
    await d.call('DELETE', '/vms/from-baked');
    expect((await d.call('DELETE', '/images/baked')).status).to.equal(200);
    expect((await d.call('GET', '/images/baked')).status).to.equal(404);
    const list = await d.call('GET', '/images');
    expect(list.status, 'a deleted image leaves the list answering').to.equal(200);
    expect(list.json.map((i: { id: string }) => i.id)).to.not.include('baked');
  });

  it('builds from a recipe in a temporary vm it then removes', async () => {
    const r = await d.call('POST', '/images', { name: 'rec', from: 'debian', run: ['true', 'test -d /'] });
    expect(r.status, r.text).to.equal(201);
    expect(r.json).to.include({ id: 'rec' });
    expect((await d.call('GET', '/vms')).json).to.satisfy((l: { name: string }[]) =>
      l.every((v) => !v.name.startsWith('img-')),
    );
  });

  it('ends a recipe whose line fails with an error event naming it, and leaves nothing behind', async () => {
    const r = await d.call('POST', '/images?stream=1', {
      name: 'broken',
      from: 'debian',
      run: ['true', 'echo nope >&2; exit 3'],
    });
    const last = ndjson(r.text).at(-1)!;
    expect(last).to.include({ phase: 'error' });
    expect(String(last.error)).to.match(/run\[1\].*exit 3.*nope/);
    expect((await d.call('GET', '/images/broken')).status).to.equal(404);
    expect((await d.call('GET', '/vms')).json).to.satisfy((l: { name: string }[]) =>
      l.every((v) => !v.name.startsWith('img-')),
    );
  });

  it('refuses a bad recipe, an unknown base and a missing vm before anything exists', async () => {
    expect((await d.call('POST', '/images', { name: 'x', from: 'debian', packages: ['no such'] })).status).to.equal(
      400,
    );
    expect((await d.call('POST', '/images', { name: 'x', from: 'nope' })).status).to.equal(400);
    expect((await d.call('POST', '/images', { name: 'x', from_vm: 'ghost' })).status).to.equal(404);
    expect((await d.call('POST', '/images', { name: 'debian', from: 'minimal' })).status).to.equal(409);
  });

  it('keeps built-in names for the built-in images, built or not', async () => {
    expect((await d.call('DELETE', '/images/minimal')).status).to.equal(200);
    const r = await d.call('POST', '/images', { name: 'minimal', from: 'debian' });
    expect(r.status, r.text).to.equal(409);
    expect(r.json.error).to.match(/built-in image name/);
  });
});
