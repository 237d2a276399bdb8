import { expect } from 'chai';
import type { CreateProgressEvent } from '../../../src/domain/events.js';
import {
  AlreadyExistsError,
  InternalError,
  InvalidArgumentError,
  InvalidStateError,
  NotSupportedError,
} from '../../../src/domain/errors.js';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecRequest, ExecResult } from '../../../src/domain/agent.js';
import { GuestAgent } from '../../../src/ports/guest-agent.js';
import { agentEndpoint } from '../../../src/app/readiness.js';
import type { VmRef } from '../../../src/ports/hypervisor.js';
import { world } from '../../fakes/world.js';
import { consoleLines, withConsoleTail } from '../../../src/app/console-tail.js';
import { DeadlineExceededError } from '../../../src/domain/errors.js';
import type { VmRecord } from '../../../src/domain/vm.js';
import type { ConsoleLogs } from '../../../src/ports/stores.js';
import { InMemoryHypervisor } from '../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { VmEdit } from '../../../src/app/vm-edit.js';

async function phases(events: AsyncIterable<CreateProgressEvent>): Promise<string[]> {
  const out: string[] = [];
  for await (const e of events) out.push(e.phase);
  return out;
}

describe('app/CreateService', () => {
  it("clones a suspended template from its snapshot with the template's size, and leaves the template as it was", async () => {
    // The hint that work ahead of the next clone may start (CloneSpeedUps): once the clone answered, for clones only.
    const ready: string[] = [];
    const hv = new InMemoryHypervisor({ bootDelayMs: 5 });
    Object.assign(hv, {
      cloneReady: (vm: VmRef) => void ready.push(`${vm.name}:${w.vms.get(vm.name).status}`),
      warmWith: () => undefined,
    });
    const w = world({}, undefined, hv);
    await (
      await w.creates.create({ name: 'tpl', persistent: true, cpus: 2, memory_mb: 768 }, {})
    ).done;
    await w.svc.suspend('tpl');
    const job = await w.creates.create({ name: 'c1', from: 'tpl' }, {});
    expect(await phases(job.events)).to.deep.equal(['accepted', 'disk', 'boot', 'wait_agent', 'ready']);
    const inst = await job.done;
    expect(inst).to.include({ name: 'c1', from: 'tpl', cpus: 2, memory_mb: 768, status: 'running' });
    expect(ready).to.deep.equal(['c1:running']);
    expect(w.vms.get('tpl').status).to.equal('suspended');
    expect(w.hv.state('tpl')).to.equal('stopped');
  });

  it('refuses a template that is running, ephemeral or missing before anything is made', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'run', persistent: true }, {})
    ).done;
    await (
      await w.creates.create({ name: 'eph' }, {})
    ).done;
    expect(await w.creates.create({ from: 'run' }, {}).catch((e) => e)).to.be.instanceOf(InvalidStateError);
    expect(await w.creates.create({ from: 'eph' }, {}).catch((e) => e)).to.be.instanceOf(InvalidStateError);
    expect(await w.creates.create({ from: 'nope' }, {}).catch((e) => e)).to.be.instanceOf(InvalidArgumentError);
    expect(w.vms.list().map((i) => i.name)).to.deep.equal(['eph', 'run']);
  });

  it('leaves nothing but logs behind when the disk step fails, and the name is free again', async () => {
    const w = world();
    w.hv.failNext('provision', 'disk full');
    const job = await w.creates.create({ name: 'x', persistent: true }, {});
    const err = await job.done.catch((e) => e);
    expect(err).to.be.instanceOf(InternalError).with.property('message', 'disk full');
    expect(w.vms.find('x')).to.equal(undefined);
    expect(w.store.records.has('x')).to.equal(false);
    expect(w.store.logsKept).to.deep.equal(['x']);
    expect(w.activity.events.at(-1)).to.include({ action: 'create', target: 'x', status: 'error' });
    await (
      await w.creates.create({ name: 'x' }, {})
    ).done;
  });

  it("gives a create that names no size the image's least when the config's default is less, and refuses less asked for", async () => {
    // the fake's debian needs 2 GB of disk and 256 MB of memory (an image baked from a VM: that VM's disk)
    const w = world({ disk_gb: 1, memory_mb: 128 });
    const vm = await (await w.creates.create({ name: 'big', image: 'debian' }, {})).done;
    expect(vm).to.include({ disk_gb: 2, memory_mb: 256 });
    expect(await (await w.creates.create({ name: 'small', image: 'minimal' }, {})).done).to.include({
      disk_gb: 1,
      memory_mb: 128,
    });
    const err = await w.creates.create({ name: 'no', image: 'debian', disk_gb: 1 }, {}).catch((e) => e);
    expect(err)
      .to.be.instanceOf(InvalidArgumentError)
      .with.property('message')
      .that.matches(/at least 2/);
    expect(w.vms.find('no')).to.equal(undefined);
  });

  it('refuses a second create of the same name while the first is still booting', async () => {
    const w = world();
    const first = await w.creates.create({ name: 'dup' }, {});
    expect(await w.creates.create({ name: 'dup' }, {}).catch((e) => e)).to.be.instanceOf(AlreadyExistsError);
    await first.done;
  });

  it('claims from the warm pool when it has a member, and clones the template when it is empty', async () => {
    const w = world({ warm_pool: { template: 'tpl', size: 1, refill_delay: '0s' } });
    await (
      await w.creates.create({ name: 'tpl', persistent: true }, {})
    ).done;
    await w.svc.suspend('tpl');
    w.pool.refill();
    await w.pool.settled();
    const [member] = w.vms.poolMembers('tpl');
    expect(member.status).to.equal('suspended');
    const claimed = await (await w.creates.create({ name: 'a', from_pool: true, tags: { t: '1' } }, {})).done;
    expect(claimed).to.include({ name: 'a', from: 'tpl', status: 'running' });
    expect(claimed.tags).to.deep.equal({ t: '1' });
    expect(w.store.records.get('a')).to.include({ name: 'a', status: 'running' }).and.not.have.property('pool');
    await w.pool.settled();
    w.pool.stop();
    const job = await w.creates.create({ name: 'b', from_pool: true }, {});
    expect((await job.done).from).to.equal('tpl');
  });

  describe('host folders on a clone', () => {
    const folder = mkdtempSync(join(tmpdir(), 'svc-clone-share-'));
    after(() => rmSync(folder, { recursive: true, force: true }));
    const mounts = [{ host: folder, guest: '/mnt/data', tag: 'data' }];

    /** A world with suspended template `tpl` whose guests' execs are recorded (never run) and answer `answer`. */
    async function withTemplate(raw: Record<string, unknown> = {}, answer?: Partial<ExecResult>) {
      const w = world({ mount_dirs: [folder], ...raw });
      await (
        await w.creates.create({ name: 'tpl', persistent: true }, {})
      ).done;
      await w.svc.suspend('tpl');
      const ran: { port: number; req: ExecRequest }[] = [];
      const agent = w.container.get<GuestAgent>(GuestAgent);
      agent.exec = async (ep, req) => {
        ran.push({ port: ep.port, req });
        return { stdout: '', stderr: '', exit_code: 0, ...answer };
      };
      return { w, ran };
    }

    it('restores the clone and has its guest mount them as it wakes', async () => {
      const { w, ran } = await withTemplate();
      const inst = await (await w.creates.create({ name: 'c', from: 'tpl', mounts }, {})).done;
      expect(inst).to.include({ from: 'tpl', status: 'running' });
      expect(inst.mounts).to.deep.equal([{ ...mounts[0], host: realpathSync(folder) }]);
      expect(ran).to.deep.equal([
        {
          port: agentEndpoint(w.vms.get('c')).port,
          req: { cmd: '/bin/sh', args: ['-c', w.hv.mountsAfterRestore(inst.mounts)], timeoutMs: ran[0].req.timeoutMs },
        },
      ]);
      expect(w.vms.get('tpl').mounts).to.deep.equal([]);
    });

    it('fails the clone with what the guest said when a share does not mount, leaving nothing', async () => {
      const { w } = await withTemplate({}, { exit_code: 1, stderr: 'share data did not appear in the guest\n' });
      const err = await (await w.creates.create({ name: 'c', from: 'tpl', mounts }, {})).done.catch((e: Error) => e);
      expect((err as Error).message).to.equal(
        'vm c could not mount its host folders: share data did not appear in the guest',
      );
      expect(w.vms.list().map((i) => i.name)).to.deep.equal(['tpl']);
      expect(w.hv.state('c')).to.equal(undefined);
    });

    it('is refused before anything is made where shares are attached only at boot, unless the template boots', async () => {
      const { w, ran } = await withTemplate();
      Object.assign(w.hv, { mountsAfterRestore: undefined });
      const err = await w.creates.create({ name: 'c', from: 'tpl', mounts }, {}).catch((e: Error) => e);
      expect(err).to.be.instanceOf(NotSupportedError);
      expect((err as Error).message).to.match(
        /^mounts on a clone of tpl, which is restored: .* only when a guest boots/,
      );
      expect(w.vms.list().map((i) => i.name)).to.deep.equal(['tpl']);
      // A stopped template's clone boots, and is given its folders at boot.
      await w.svc.restore('tpl');
      await w.svc.shutdown('tpl');
      const inst = await (await w.creates.create({ name: 'c', from: 'tpl', mounts }, {})).done;
      expect(inst.mounts).to.have.length(1);
      expect(ran).to.deep.equal([]);
    });

    it('is refused before anything is made for a template without an agent to mount them', async () => {
      const { w, ran } = await withTemplate();
      w.vms.get('tpl').agent_missing = true;
      const err = await w.creates.create({ name: 'c', from: 'tpl', mounts }, {}).catch((e: Error) => e);
      expect(err).to.be.instanceOf(InvalidArgumentError);
      expect((err as Error).message).to.match(/^mounts on a clone of tpl, which is restored: it has no svc-agent/);
      expect(w.vms.list().map((i) => i.name)).to.deep.equal(['tpl']);
      expect(ran).to.deep.equal([]);
    });

    it('from_pool: a running member cannot take shares, so the template is cloned', async () => {
      const { w, ran } = await withTemplate({ warm_pool: { template: 'tpl', size: 1, refill_delay: '0s' } });
      w.pool.refill();
      await w.pool.settled();
      const [member] = w.vms.poolMembers('tpl');
      const inst = await (await w.creates.create({ name: 'p', from_pool: true, mounts }, {})).done;
      expect(inst).to.include({ name: 'p', from: 'tpl' });
      expect(w.vms.poolMembers('tpl').map((m) => m.name)).to.include(member.name);
      expect(ran.map((r) => r.port)).to.deep.equal([agentEndpoint(w.vms.get('p')).port]);
      w.pool.stop();
    });
  });

  it('refuses from_pool when no warm pool is configured', async () => {
    const w = world();
    expect(await w.creates.create({ from_pool: true }, {}).catch((e) => e)).to.be.instanceOf(InvalidArgumentError);
  });

  it("refuses at once a VM with less memory than its image boots in, leaving nothing; a clone is its template's size", async () => {
    const w = world();
    const err = await w.creates.create({ name: 'tinymem', image: 'minimal', memory_mb: 64 }, {}).catch((e: Error) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.equal(
      'memory_mb 64 is too little for image minimal: it boots in at least 128 MB',
    );
    expect(w.vms.find('tinymem')).to.equal(undefined);
    const ok = await (await w.creates.create({ name: 'small', image: 'minimal', memory_mb: 128 }, {})).done;
    expect(ok.memory_mb).to.equal(128);
  });

  it("refuses at once more vCPUs than the hypervisor gives one VM, at a create and at an edit; a clone is its template's", async () => {
    const w = world({}, undefined, new InMemoryHypervisor({ bootDelayMs: 5, maxCpus: 2 }));
    const err = await w.creates.create({ name: 'wide', cpus: 3 }, {}).catch((e: Error) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.match(
      /^cpus 3 is more than one vm may have on this host \(2: its CPUs, unless the hypervisor's config sets max_vm_cpus\)$/,
    );
    expect(w.vms.find('wide')).to.equal(undefined);
    const ok = await (await w.creates.create({ name: 'two', cpus: 2, persistent: true }, {})).done;
    expect(ok.cpus).to.equal(2);
    await w.svc.shutdown('two');
    const edits = w.container.get(VmEdit);
    expect(await edits.edit('two', { cpus: 3 }).catch((e: Error) => e.message)).to.match(/^cpus 3 is more than/);
    expect((await edits.edit('two', { cpus: 1 })).cpus).to.equal(1);
  });

  it("reads a console's last lines as a person would: no escapes, no blank lines, no stack dump but the faulting function", () => {
    const dump = [
      '\x1b[0mSeaBIOS',
      '[    1.69] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)',
      '[    1.70] CPU: 0 PID: 1 Comm: swapper/0 Not tainted 6.1.0-56-amd64 #1  Debian 6.1.158-1',
      '[    1.705] RIP: 0010:native_write_msr+0x4/0x30',
      '[    1.706] RSP: 0018:ffffb4c0c0013e48 EFLAGS: 00010246',
      '[    1.707] RAX: 0000000000000000 RBX: 0000000000000001 RCX: 0000000000000001',
      '[    1.71] Call Trace:',
      '[    1.72]  <TASK>',
      '[    1.73]  dump_stack_lvl+0x44/0x5c',
      '[    1.74]  ? rest_init+0xd0/0xd0',
      '[    1.75]  </TASK>',
      '[    1.76] Kernel Offset: disabled',
      '',
      'x'.repeat(300),
    ].join('\r\n');
    expect(consoleLines(dump)).to.deep.equal([
      'SeaBIOS',
      '[    1.69] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)',
      '[    1.705] RIP: 0010:native_write_msr+0x4/0x30',
      `${'x'.repeat(197)}...`,
    ]);
    expect(consoleLines('')).to.deep.equal([]);
  });

  it('tells a boot that failed by its console, and leaves a create refused for what it asked without it', async () => {
    const consoles = {
      async *read() {
        yield Buffer.from('svc minimal: init started\n');
      },
    } as unknown as ConsoleLogs;
    const rec = { name: 'v', runtime: {} } as unknown as VmRecord;
    const boot = await withConsoleTail(
      consoles,
      rec,
      new DeadlineExceededError('timed out waiting for the agent'),
      'the console log is kept in /data/logs',
    );
    expect(boot.message).to.equal(
      "timed out waiting for the agent\nthe console's last lines:\n  | svc minimal: init started\n(the console log is kept in /data/logs)",
    );
    const asked = new InvalidArgumentError('egress_secrets: there is no host secret nope');
    expect(await withConsoleTail(consoles, rec, asked, 'the console log is kept in /data/logs')).to.equal(asked);
  });
});
