import { expect } from 'chai';
import type { CreateProgressEvent } from '../../../src/domain/events.js';
import type { LaunchOptions, VmHandle, VmRef, VmSpec } from '../../../src/ports/hypervisor.js';
import type { ConsoleLogs } from '../../../src/ports/stores.js';
import { InMemoryHypervisor } from '../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { world } from '../../fakes/world.js';

/**
 * A fake whose guests hang at their first `hangs` boots: the process runs (a pid), its console is
 * silent and its CPU idle (the meter below), and nothing answers. Each launch is a new pid.
 */
class HangingBoots extends InMemoryHypervisor {
  launches = 0;
  kills = 0;
  private upFrom = new Map<string, number>();

  constructor(private readonly hangs: number) {
    super({ bootDelayMs: 5 });
  }

  override async launch(spec: VmSpec, options: LaunchOptions = {}): Promise<VmHandle> {
    const h = await super.launch(spec, options);
    this.launches++;
    if (!this.upFrom.has(spec.name)) this.upFrom.set(spec.name, this.launches + this.hangs);
    return { ...h, pid: 40_000 + this.launches };
  }

  override async kill(vm: VmRef): Promise<void> {
    this.kills++;
    await super.kill(vm);
  }

  override guestUp(name: string): boolean {
    return this.launches >= (this.upFrom.get(name) ?? 0) && super.guestUp(name);
  }
}

const silent = { size: async () => 0, read: async function* () {} } as unknown as ConsoleLogs;
const idle = { cpuMs: async () => 5 };

async function run(hangs: number, config: Record<string, unknown> = {}) {
  const hv = new HangingBoots(hangs);
  const w = world({ boot_stall_timeout: '1200ms', ready_timeout: '30s', ...config }, undefined, hv, silent, idle);
  const job = await w.creates.create({ name: 'h', persistent: true }, {});
  const events: CreateProgressEvent[] = [];
  for await (const e of job.events) events.push(e);
  const done = await job.done.then(
    (inst) => ({ inst, err: undefined }),
    (err: Error) => ({ inst: undefined, err }),
  );
  return { w, hv, events, ...done };
}

describe('app: a cold boot that hangs is booted again (boot_stall_retries)', function () {
  this.timeout(20_000);

  it('kills a guest that hung in its boot and boots it again: the create succeeds and says so', async () => {
    const { hv, events, inst, err, w } = await run(1);
    expect(err, String(err)).to.equal(undefined);
    expect(inst!.status).to.equal('running');
    expect(hv.launches).to.equal(2);
    expect(hv.kills).to.equal(1);
    const again = events.filter((e) => e.phase === 'boot' && /booting it again/.test(e.message));
    expect(again, JSON.stringify(events)).to.have.length(1);
    expect(again[0].message).to.match(/the guest hangs: its console printed nothing/);
    // The record names the new process, not the one killed.
    expect(w.vms.get('h').pid).to.equal(40_002);
  });

  it('fails once every try hung, saying how many boots it took, and leaves nothing behind', async () => {
    const { hv, err, w } = await run(5);
    expect(hv.launches).to.equal(2);
    expect(err?.message).to.match(
      /the guest hangs: .*\(config boot_stall_timeout\), at each of its 2 boots \(config boot_stall_retries\)\n/,
    );
    expect(w.vms.find('h')).to.equal(undefined);
  });

  it('never boots again with boot_stall_retries 0', async () => {
    const { hv, err } = await run(1, { boot_stall_retries: 0 });
    expect(hv.launches).to.equal(1);
    expect(err?.message).to.match(/the guest hangs/);
    expect(err?.message).not.to.match(/at each of its/);
  });

  it('boots a start that hangs again too', async () => {
    const hv = new HangingBoots(0);
    const w = world({ boot_stall_timeout: '1200ms', ready_timeout: '30s' }, undefined, hv, silent, idle);
    await (
      await w.creates.create({ name: 's', persistent: true }, {})
    ).done;
    await w.svc.shutdown('s');
    // Its next boot hangs once.
    const up = hv.guestUp.bind(hv);
    const at = hv.launches + 2;
    hv.guestUp = (name) => hv.launches >= at && up(name);
    expect((await w.svc.start('s')).status).to.equal('running');
    expect(hv.launches).to.equal(at);
  });
});
