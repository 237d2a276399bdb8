import { expect } from 'chai';
import { ImageService } from '../../../src/app/image-service.js';
import { InMemoryHypervisor } from '../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import type { CreateProgressEvent } from '../../../src/domain/events.js';
import { world } from '../../fakes/world.js';
import type { SilentLogger } from '../../fakes/fakes.js';
import { Logger } from '../../../src/ports/logger.js';

describe('app/ImageService: the default image on a first start', () => {
  it('builds it in the background, and a create that comes meanwhile joins that build with its progress', async () => {
    const hv = new InMemoryHypervisor({ bootDelayMs: 5, unbuilt: ['debian'], buildDelayMs: 200 });
    const w = world({}, undefined, hv);
    const build = await w.container.get(ImageService).prebuildDefault();
    expect(build, 'a build started').to.not.equal(undefined);
    const job = await w.creates.create({ name: 'first' }, {});
    const phases: string[] = [];
    const said: string[] = [];
    for await (const e of job.events as AsyncIterable<CreateProgressEvent>) {
      phases.push(e.phase);
      said.push(e.message);
    }
    expect(phases.slice(0, 2)).to.deep.equal(['accepted', 'image']);
    // Said before the wait: what it waits for and about how long.
    expect(said[1]).to.equal('building image debian first (its first use here; a minute or two), then the vm');
    expect(phases.at(-1)).to.equal('ready');
    await build!.done;
    expect(hv.builds, 'one build, shared').to.deep.equal(['debian']);
    // Built now: nothing more to do on the next start.
    expect(await w.container.get(ImageService).prebuildDefault()).to.equal(undefined);
  });

  /**
   * The default image built on a first start with `config`; once its default shape is captured,
   * the phases of a create that names no shape (as `first`), and the snapshots made.
   */
  async function firstCreateAfterBuild(config: Parameters<typeof world>[0]) {
    const hv = new InMemoryHypervisor({ bootDelayMs: 5, unbuilt: ['debian'], buildDelayMs: 20 });
    const w = world(config, undefined, hv);
    const images = w.container.get(ImageService);
    await (await images.prebuildDefault())!.done;
    for (let i = 0; i < 200 && !(await images.get('debian')).snapshots?.length; i++)
      await new Promise((r) => setTimeout(r, 10));
    const snapshots = (await images.get('debian')).snapshots ?? [];
    const job = await w.creates.create({ name: 'first' }, {});
    const phases: string[] = [];
    for await (const e of job.events as AsyncIterable<CreateProgressEvent>) phases.push(e.phase);
    return { w, snapshots, phases };
  }

  it('captures the default shape after that build, so the first create restores', async () => {
    const { snapshots, phases } = await firstCreateAfterBuild({ create_from_snapshot: true, cpus: 2, memory_mb: 1024 });
    expect(snapshots).to.deep.include.members([{ ...snapshots[0], cpus: 2, memory_mb: 1024, disk_gb: 4 }]);
    expect(phases).to.include('restore');
    expect(phases).to.not.include('boot');
  });

  it("captures the default shape in the image's least memory when the config's is less, so the first create restores", async () => {
    // debian boots in at least 256 MB (fake-images.ts): a create that names no memory gets that
    const { w, snapshots, phases } = await firstCreateAfterBuild({
      create_from_snapshot: true,
      cpus: 1,
      memory_mb: 128,
    });
    expect(snapshots.map((s) => s.memory_mb)).to.deep.equal([256]);
    expect(phases).to.include('restore');
    expect(w.vms.get('first').memory_mb).to.equal(256);
  });

  it('builds again the built-in images an older svc built; the VMs on one keep its older build, new VMs get the new one', async () => {
    const hv = new InMemoryHypervisor({ bootDelayMs: 5, outdated: ['debian', 'minimal'], buildDelayMs: 20 });
    const w = world({}, undefined, hv);
    await (
      await w.creates.create({ name: 'on-debian' }, {})
    ).done;
    const images = w.container.get(ImageService);
    expect((await images.list()).filter((i) => i.outdated).map((i) => i.id)).to.deep.equal(['debian', 'minimal']);
    const refresh = await images.refreshOutdated();
    await refresh!.done;
    expect(hv.builds.sort()).to.deep.equal(['debian', 'minimal']);
    expect((await images.list()).filter((i) => i.outdated)).to.deep.equal([]);
    // minimal's older build went at once (no VM on it), debian's stays for on-debian
    const older = Object.fromEntries((await images.list()).map((i) => [i.id, i.older_builds]));
    expect(older).to.deep.include({ debian: 1, minimal: undefined });
    const log = JSON.stringify(w.container.get<SilentLogger>(Logger).lines);
    expect(log).to.match(
      /building the image again: it was built by an older svc; the VMs on it keep the build they stand on/,
    );
    expect(log).to.match(/"in_use_by":\["on-debian"\]/);
    expect(log).to.match(/"image":"minimal".*removed older builds of the image that no VM stands on any more/);
    // nothing more to do now
    expect(await images.refreshOutdated()).to.equal(undefined);
    // a new VM comes up from the new build
    await (
      await w.creates.create({ name: 'new-one' }, {})
    ).done;
    expect(w.vms.get('new-one').status).to.equal('running');
  });

  it("removes an image's older build once the last VM on it is deleted, while VMs on its new build stay", async () => {
    const hv = new InMemoryHypervisor({ bootDelayMs: 5, outdated: ['debian'], buildDelayMs: 10 });
    const w = world({}, undefined, hv);
    for (const name of ['a', 'b']) await (await w.creates.create({ name }, {})).done;
    const images = w.container.get(ImageService);
    const stop = images.forgetOlderBuildsWhenFreed();
    await (await images.refreshOutdated())!.done;
    const olderOf = async () => (await images.list()).find((i) => i.id === 'debian')!.older_builds;
    expect(await olderOf()).to.equal(1);
    await (
      await w.creates.create({ name: 'on-new' }, {})
    ).done;
    await w.svc.delete('a');
    await new Promise((r) => setTimeout(r, 20));
    expect(await olderOf(), 'b still stands on it').to.equal(1);
    await w.svc.delete('b');
    const t0 = Date.now();
    while ((await olderOf()) && Date.now() - t0 < 3000) await new Promise((r) => setTimeout(r, 10));
    expect(await olderOf()).to.equal(undefined);
    expect(w.vms.get('on-new').status).to.equal('running');
    stop();
  });

  it('has a create that comes during such a build wait for the new image, and say why', async () => {
    const hv = new InMemoryHypervisor({ bootDelayMs: 5, outdated: ['minimal'], buildDelayMs: 150 });
    const w = world({}, undefined, hv);
    const refresh = await w.container.get(ImageService).refreshOutdated();
    const job = await w.creates.create({ name: 'during', image: 'minimal' }, {});
    const said: string[] = [];
    for await (const e of job.events as AsyncIterable<CreateProgressEvent>) said.push(`${e.phase} ${e.message}`);
    expect(said[1]).to.equal(
      'image building image minimal again (an older svc built it; a minute or two), then the vm',
    );
    expect(said.at(-1)).to.match(/^ready /);
    await refresh!.done;
    expect(hv.builds, 'one build, joined').to.deep.equal(['minimal']);
    expect(w.vms.get('during').status).to.equal('running');
  });

  it('builds nothing when build_default_image is off', async () => {
    const hv = new InMemoryHypervisor({ unbuilt: ['debian'] });
    const w = world({ build_default_image: false }, undefined, hv);
    expect(await w.container.get(ImageService).prebuildDefault()).to.equal(undefined);
    expect(hv.builds).to.deep.equal([]);
    const older = new InMemoryHypervisor({ outdated: ['debian'] });
    const w2 = world({ build_default_image: false }, undefined, older);
    expect(await w2.container.get(ImageService).refreshOutdated()).to.equal(undefined);
    expect(older.builds).to.deep.equal([]);
  });
});
