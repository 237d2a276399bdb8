import { expect } from 'chai';
import type { CreateProgressEvent } from '../../../src/domain/events.js';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { toPublic } from '../../../src/domain/vm.js';
import { ImageService } from '../../../src/app/image-service.js';
import { InMemoryHypervisor } from '../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { world } from '../../fakes/world.js';

async function phases(events: AsyncIterable<CreateProgressEvent>): Promise<string[]> {
  const out: string[] = [];
  for await (const e of events) out.push(e.phase);
  return out;
}

const APP_ENTRYPOINT = {
  cmd: '/srv/app/serve',
  args: ['--port', '8080'],
  user: 'app',
  cwd: '/srv/app',
  tag: 'entrypoint',
};

/**
 * An image's entrypoint (a container image's Entrypoint and Cmd) reaches the hypervisor with
 * every cold boot of a VM of it, unless the create said `entrypoint: false`; a clone's is its
 * template's; a snapshot made without it is kept apart. The fake's `app` image has one.
 */
describe('app: the image entrypoint a VM boots with', () => {
  it('hands the entrypoint to each boot of a VM of the image, and none when the create said entrypoint false', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'on', image: 'app', persistent: true }, {})
    ).done;
    await (
      await w.creates.create({ name: 'off', image: 'app', persistent: true, entrypoint: false }, {})
    ).done;
    await (
      await w.creates.create({ name: 'deb', image: 'debian' }, {})
    ).done;
    expect(w.hv.launchedWith('on')?.entrypoint).to.deep.equal(APP_ENTRYPOINT);
    expect(w.hv.launchedWith('off')?.entrypoint).to.equal(undefined);
    expect(w.hv.launchedWith('deb')?.entrypoint).to.equal(undefined);
    // A start after a shutdown is a cold boot of the same record.
    for (const vm of ['on', 'off']) {
      await w.svc.shutdown(vm);
      await w.svc.start(vm);
    }
    expect(w.hv.launchedWith('on')?.entrypoint).to.deep.equal(APP_ENTRYPOINT);
    expect(w.hv.launchedWith('off')?.entrypoint).to.equal(undefined);
    // The choice is kept, not shown.
    expect(w.vms.get('off').entrypoint).to.equal(false);
    expect(toPublic(w.vms.get('off'))).to.not.have.property('entrypoint');
  });

  it('hands the entrypoint with the restart policy the create gave, at each boot and to its clones', async () => {
    const w = world();
    await (
      await w.creates.create(
        { name: 'r', image: 'app', persistent: true, entrypoint: { restart: 'always', max_restarts: 3 } },
        {},
      )
    ).done;
    const restarting = { ...APP_ENTRYPOINT, restart: 'always', max_restarts: 3 };
    expect(w.hv.launchedWith('r')?.entrypoint).to.deep.equal(restarting);
    await w.svc.shutdown('r');
    await w.svc.start('r');
    expect(w.hv.launchedWith('r')?.entrypoint).to.deep.equal(restarting);
    await w.svc.shutdown('r');
    await (
      await w.creates.create({ name: 'rc', from: 'r', persistent: true }, {})
    ).done;
    expect(w.vms.get('rc').entrypoint).to.deep.equal({ restart: 'always', max_restarts: 3 });
    expect(w.hv.launchedWith('rc')?.entrypoint).to.deep.equal(restarting);
    // restart "no" is the entrypoint as it is; an image without one runs none either way.
    await (
      await w.creates.create({ name: 'n', image: 'app', entrypoint: { restart: 'no' } }, {})
    ).done;
    expect(w.hv.launchedWith('n')?.entrypoint).to.deep.equal(APP_ENTRYPOINT);
    await (
      await w.creates.create({ name: 'deb', image: 'debian', entrypoint: { restart: 'on-failure' } }, {})
    ).done;
    expect(w.hv.launchedWith('deb')?.entrypoint).to.equal(undefined);
    for (const [bad, what] of [
      [{ restart: 'sometimes' }, /restart must be/],
      [{ restart: 'always', pty: true }, /unknown field entrypoint.pty/],
      [{ max_restarts: 2 }, /max_restarts needs restart/],
    ] as const) {
      let err: unknown;
      await w.creates.create({ name: 'x', image: 'app', entrypoint: bad }, {}).catch((e: unknown) => (err = e));
      expect(err, JSON.stringify(bad)).to.be.instanceOf(InvalidArgumentError);
      expect((err as Error).message).to.match(what);
    }
  });

  it("gives a clone its template's choice, and refuses one of its own", async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'tpl', image: 'app', persistent: true, entrypoint: false }, {})
    ).done;
    await w.svc.shutdown('tpl');
    await (
      await w.creates.create({ name: 'c1', from: 'tpl', persistent: true }, {})
    ).done;
    expect(w.vms.get('c1').entrypoint).to.equal(false);
    expect(w.hv.launchedWith('c1')?.entrypoint).to.equal(undefined);
    let err: unknown;
    await w.creates.create({ name: 'c2', from: 'tpl', entrypoint: true }, {}).catch((e: unknown) => (err = e));
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.equal("entrypoint cannot be set on a clone: it is the template's");
    await w.creates
      .create({ name: 'c3', image: 'app', entrypoint: 'no' }, {})
      .then(() => expect.fail('a string was taken'))
      .catch((e: Error) =>
        expect(e.message).to.equal('entrypoint must be a boolean or {restart, max_restarts?}, got "no"'),
      );
  });

  it('restores a create of an image without an entrypoint from its one snapshot either way; an image with one has a snapshot apart', async function () {
    this.timeout(10_000);
    const hv = new InMemoryHypervisor({ bootDelayMs: 5 });
    const w = world({ create_from_snapshot: true, cpus: 1, memory_mb: 512 }, undefined, hv);
    const images = w.container.get(ImageService);
    const snapshotsOf = async (image: string, n: number) => {
      for (let i = 0; i < 300 && ((await images.get(image)).snapshots?.length ?? 0) < n; i++)
        await new Promise((r) => setTimeout(r, 10));
      return (await images.get(image)).snapshots ?? [];
    };
    const create = async (body: Record<string, unknown>) => phases((await w.creates.create(body, {})).events);

    // debian has no entrypoint: entrypoint false is the same guest, restored from the same snapshot.
    expect(await create({ name: 'd1', image: 'debian' })).to.include('boot');
    expect(await snapshotsOf('debian', 1)).to.have.length(1);
    expect(await create({ name: 'd2', image: 'debian', entrypoint: false })).to.include('restore');
    expect(await snapshotsOf('debian', 1)).to.have.length(1);

    // app runs one: its snapshot's guest runs it, so a create that asks for none boots, and a
    // snapshot without it is made beside the other (neither replaces the other).
    expect(await create({ name: 'a1', image: 'app' })).to.include('boot');
    expect(await snapshotsOf('app', 1)).to.have.length(1);
    expect(await create({ name: 'a2', image: 'app', entrypoint: false })).to.include('boot');
    const both = await snapshotsOf('app', 2);
    expect(both.map((s) => s.entrypoint ?? true).sort()).to.deep.equal([false, true]);
    expect(await create({ name: 'a3', image: 'app', entrypoint: false })).to.include('restore');
    expect(await create({ name: 'a4', image: 'app' })).to.include('restore');
    // A restart policy is another guest again (its keeper restarts): a snapshot of its own.
    const restart = { restart: 'on-failure', max_restarts: 2 };
    expect(await create({ name: 'a5', image: 'app', entrypoint: restart })).to.include('boot');
    const three = await snapshotsOf('app', 3);
    expect(three.map((s) => JSON.stringify(s.entrypoint ?? true)).sort()).to.deep.equal(
      ['false', 'true', JSON.stringify(restart)].sort(),
    );
    expect(await create({ name: 'a6', image: 'app', entrypoint: restart })).to.include('restore');
    expect(w.hv.launchedWith('a5')?.entrypoint).to.include({ restart: 'on-failure', max_restarts: 2 });
  });
});
