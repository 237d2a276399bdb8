import { expect } from 'chai';
import { mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  NotSupportedError,
} from '../../src/domain/errors.js';
import type { VmHandle, VmSpec } from '../../src/ports/hypervisor.js';
import type { HypervisorAdapter } from '../../src/ports/hypervisor-adapter.js';
import { tempDir } from '../helpers/daemon.js';
import { poll } from '../helpers/wait.js';

export interface ContractSubject {
  hv: HypervisorAdapter;
  image: string;
  /** Resolves once the guest answers (agent health), or throws after `ms`. */
  waitUp(name: string, h: VmHandle, ms: number): Promise<void>;
  /** True while the guest answers within a short time. */
  answers(name: string, h: VmHandle): Promise<boolean>;
  /** Kills the VM's process from outside the adapter. */
  crash(name: string, h: VmHandle): Promise<void>;
  /** Live VM processes the adapter knows, by name. */
  live(): string[];
  /**
   * What a restarted daemon would get: the adapter it re-attaches with (QEMU: a new instance after
   * the old one released its VMs; the fake: the same instance, whose VMs live in memory).
   */
  restart(): Promise<HypervisorAdapter>;
  bootMs: number;
  /**
   * What the driver carries (both by default). A driver without a guest network has no forwards
   * and no SSH port; one without shares refuses every mount. The contract checks that it says so
   * (NotSupported), not that it pretends.
   */
  features?: { forwards: boolean; mounts: boolean; fork?: boolean };
}

/**
 * One contract, run against InMemoryHypervisor (unit) and QemuHypervisor (e2e), so the fake
 * cannot drift from the real thing.
 */
export function hypervisorContract(
  label: string,
  make: () => Promise<ContractSubject>,
  teardown: () => Promise<void> = async () => undefined,
): void {
  describe(`Hypervisor contract: ${label}`, function () {
    let s: ContractSubject;
    let dir: string;
    const exits: [string, string][] = [];
    const has = (f: 'forwards' | 'mounts' | 'fork') => s.features?.[f] ?? true;
    const spec = (name: string): VmSpec => {
      const d = join(dir, name);
      if (name === 'c3') rmSync(d, { recursive: true, force: true });
      else mkdirSync(d, { recursive: true });
      const forwards: VmSpec['forwards'] = has('forwards') ? [{ host_port: 0, guest_port: 8080, proto: 'tcp' }] : [];
      return {
        name,
        dir: d,
        cpus: 1,
        memory_mb: 384,
        disk_gb: 2,
        image: s.image,
        hostname: name,
        forwards,
        mounts: [],
      };
    };
    /** Where the daemon reaches a VM's agent: its own socket (hybrid vsock) or its own host port. */
    const agentAt = (h: VmHandle) => h.agent_socket ?? h.agent_port;
    before(async () => {
      s = await make();
      dir = tempDir('svc-contract-');
      s.hv.onExit((n, r) => exits.push([n, r]));
    });
    after(async () => {
      for (const n of s.live()) await s.hv.destroy({ name: n, dir: join(dir, n) });
      await teardown();
    });

    it('refuses an unknown image with InvalidArgument', async () => {
      expect(await s.hv.resolveImage('no-such-image').catch((e) => e)).to.be.instanceOf(InvalidArgumentError);
      expect((await s.hv.resolveImage(s.image)).id).to.equal(s.image);
      // `default` names the debian image, on every hypervisor.
      expect((await s.hv.resolveImage('default')).id).to.equal('debian');
    });

    it('provisions, launches with forwards, pauses and resumes; stop is graceful, idempotent and not a crash', async function () {
      this.timeout(s.bootMs * 3 + 60_000);
      const sp = spec('c1');
      await s.hv.provision(sp);
      if (!has('forwards')) {
        const asked = { ...sp, forwards: [{ host_port: 0, guest_port: 8080, proto: 'tcp' as const }] };
        expect(await s.hv.launch(asked).catch((e) => e)).to.be.instanceOf(NotSupportedError);
        expect(s.live()).not.to.include('c1');
      }
      const h = await s.hv.launch(sp);
      expect(h.agent_port).to.be.above(0);
      if (has('forwards')) {
        expect(h.ssh_port).to.be.above(0);
        expect(h.forwards).to.have.length(1);
        expect(h.forwards[0].host_port).to.be.above(1023);
      } else {
        expect(h.forwards).to.deep.equal([]);
      }
      await s.waitUp('c1', h, s.bootMs);
      await s.hv.pause(sp);
      expect(await s.answers('c1', h)).to.equal(false);
      await s.hv.resume(sp);
      await s.waitUp('c1', h, 10_000);
      await s.hv.stop(sp, 30_000);
      expect(s.live()).not.to.include('c1');
      await s.hv.stop(sp, 30_000);
      expect(exits.filter(([n]) => n === 'c1')).to.deep.equal([]);
    });

    it('suspends to a snapshot and restores from it; without a snapshot launch cold-boots', async function () {
      this.timeout(s.bootMs * 3 + 60_000);
      const sp = spec('c1');
      const h = await s.hv.launch(sp);
      expect(h.restored_from_snapshot).to.equal(false);
      await s.waitUp('c1', h, s.bootMs);
      expect(await s.hv.suspend(sp)).to.deep.equal({ snapshot: true });
      expect(s.live()).not.to.include('c1');
      const r = await s.hv.launch(sp, { restore: true });
      expect(r.restored_from_snapshot).to.equal(true);
      await s.waitUp('c1', r, 20_000);
      await s.hv.stop(sp, 30_000);
      const cold = await s.hv.launch(sp, { restore: true });
      expect(cold.restored_from_snapshot).to.equal(false);
      await s.hv.kill(sp);
      expect(exits.filter(([n]) => n === 'c1')).to.deep.equal([]);
    });

    it('clones a suspended VM from its snapshot, and a renamed stopped VM launches under its new name', async function () {
      this.timeout(s.bootMs * 2 + 60_000);
      const sp = spec('c1');
      const h = await s.hv.launch(sp);
      await s.waitUp('c1', h, s.bootMs);
      expect(await s.hv.suspend(sp)).to.deep.equal({ snapshot: true });
      const cs = spec('c2');
      expect(await s.hv.clone(sp, cs)).to.deep.equal({ snapshot: true });
      const ch = await s.hv.launch(cs, { restore: true });
      expect(ch.restored_from_snapshot).to.equal(true);
      expect(agentAt(ch)).not.to.equal(agentAt(h));
      await s.waitUp('c2', ch, 20_000);
      await s.hv.kill(cs);
      const renamed = spec('c3');
      renameSync(cs.dir, renamed.dir);
      await s.hv.rename(cs, renamed);
      const rh = await s.hv.launch(renamed);
      await s.waitUp('c3', rh, s.bootMs);
      expect(s.live()).to.include('c3');
      await s.hv.destroy(renamed);
      await s.hv.stop(sp, 30_000);
      expect(exits.filter(([n]) => n.startsWith('c'))).to.deep.equal([]);
    });

    it('captures a running VM for forks: it runs on, a fork restores from the capture; a VM not running is refused', async function () {
      this.timeout(s.bootMs * 2 + 60_000);
      const sp = spec('k1');
      if (!has('fork')) {
        expect(await s.hv.capture(sp).catch((e: unknown) => e)).to.be.instanceOf(NotSupportedError);
        return;
      }
      expect(await s.hv.capture(sp).catch((e: unknown) => e)).to.be.instanceOf(InvalidStateError);
      await s.hv.provision(sp);
      const h = await s.hv.launch(sp);
      await s.waitUp('k1', h, s.bootMs);
      const { id, paused_ms } = await s.hv.capture(sp);
      expect(id).to.match(/^base-[0-9a-f]{16}$/);
      expect(paused_ms).to.be.a('number').at.least(0);
      const fs = spec('k2');
      expect(await s.hv.clone(sp, fs, id)).to.deep.equal({ snapshot: true });
      // The fork holds its own links: the capture can go from the source before the fork starts.
      await s.hv.dropCapture(sp, id);
      const fh = await s.hv.launch(fs, { restore: true });
      expect(fh.restored_from_snapshot).to.equal(true);
      await s.waitUp('k2', fh, 20_000);
      await s.waitUp('k1', h, 5_000);
      await s.hv.destroy(fs);
      await s.hv.stop(sp, 30_000);
      expect(exits.filter(([n]) => n.startsWith('k'))).to.deep.equal([]);
    });

    it('checks mounts against the rule: real paths inside allowed folders, never / or the data dir', async () => {
      const share = join(dir, 'share');
      const data = join(dir, 'data');
      mkdirSync(join(share, 'sub'), { recursive: true });
      mkdirSync(data, { recursive: true });
      symlinkSync(data, join(share, 'to-data'));
      symlinkSync('/etc', join(share, 'to-etc'));
      const rule = { allowed: [share, data], forbidden: [data] };
      const refused = async (host: string, what: RegExp) => {
        const e = await s.hv.checkMounts([{ host, guest: '/mnt/x' }], rule).catch((x: Error) => x);
        expect(e, host).to.be.instanceOf(InvalidArgumentError);
        expect((e as Error).message, host).to.match(what);
      };
      await refused(join(share, 'no-such-dir'), /not an existing directory/);
      // Outside the allowed folders nothing is looked up: a missing folder and /etc get the same words.
      await refused(join(dir, 'no-such-dir'), /no-such-dir is outside the folders that may be shared/);
      await refused('/', /is outside/);
      await refused('/etc', /outside the folders that may be shared.*mount_dirs/);
      await refused(join(share, 'to-etc'), /to-etc is a link that leads outside the folders/);
      await refused(join(share, 'sub', '..', '..', 'share', 'to-etc'), /a link that leads outside/);
      const e = await s.hv.checkMounts([{ host: join(share, 'to-etc'), guest: '/mnt/x' }], rule).catch((x: Error) => x);
      expect((e as Error).message, "a link's target is not named").to.not.include('(/etc)');
      await refused(join(share, 'to-data'), /inside svc's data dir/);
      await refused(dir, /holds svc's data dir|outside/);
      const good = s.hv.checkMounts([{ host: join(share, 'sub', '..', 'sub'), guest: '/mnt/x', readonly: true }], rule);
      if (has('mounts'))
        expect(await good).to.deep.equal([{ host: join(share, 'sub'), guest: '/mnt/x', readonly: true }]);
      else expect(await good.catch((e) => e)).to.be.instanceOf(NotSupportedError);
      expect(await s.hv.checkMounts([], rule)).to.deep.equal([]);
    });

    it('imports only files inside the allowed folders that are what they claim, and a refused import leaves no image', async () => {
      const inbox = join(dir, 'inbox');
      mkdirSync(inbox, { recursive: true });
      writeFileSync(join(inbox, 'notes.qcow2'), 'not a disk\n'.repeat(100));
      writeFileSync(join(dir, 'outside.raw'), Buffer.alloc(1024));
      symlinkSync(join(dir, 'outside.raw'), join(inbox, 'link.raw'));
      const before = (await s.hv.listImages(() => [])).map((i) => i.id);
      const refused = async (type: 'disk' | 'oci-archive', path: string, allowed: string[], what: RegExp) => {
        const e = await s.hv
          .importImage(
            'contract-import',
            { type, path },
            { dirs: allowed, insecureRegistries: [] },
            {},
            () => undefined,
          )
          .catch((x: Error) => x);
        expect(e, path).to.be.instanceOf(InvalidArgumentError);
        expect((e as Error).message, path).to.match(what);
      };
      await refused('disk', join(inbox, 'notes.qcow2'), [], /import_dirs is empty/);
      await refused('disk', join(dir, 'outside.raw'), [inbox], /outside the folders images may be imported from/);
      await refused('disk', join(inbox, 'link.raw'), [inbox], /link\.raw is a link that leads outside/);
      await refused('disk', join(inbox, 'notes.qcow2'), [inbox], /neither a qcow2 nor a raw disk/);
      await refused('oci-archive', join(inbox, 'notes.qcow2'), [inbox], /not a tar archive/);
      await refused('disk', inbox, [dir], /not a regular file/);
      expect((await s.hv.listImages(() => [])).map((i) => i.id)).to.deep.equal(before);
      expect(await s.hv.resolveImage('contract-import').catch((e) => e)).to.be.instanceOf(InvalidArgumentError);
    });

    it('adds host forwards to a running VM, refuses a busy host port, and kill is idempotent and not a crash', async function () {
      this.timeout(s.bootMs + 60_000);
      const sp = spec('c5');
      await s.hv.provision(sp);
      const h = await s.hv.launch(sp);
      await s.waitUp('c5', h, s.bootMs);
      if (!has('forwards')) {
        expect(
          await s.hv.addForwards(sp, [{ host_port: 0, guest_port: 7475, proto: 'tcp' }]).catch((e) => e),
        ).to.be.instanceOf(NotSupportedError);
        await s.hv.kill(sp);
        await s.hv.kill(sp);
        expect(s.live()).not.to.include('c5');
        expect(exits.filter(([n]) => n === 'c5')).to.deep.equal([]);
        return s.hv.destroy(sp);
      }
      const added = await s.hv.addForwards(sp, [{ host_port: 0, guest_port: 7475, proto: 'tcp' }]);
      expect(added.forwards).to.have.length(2);
      const fwd = added.forwards.find((f) => f.guest_port === 7475)!;
      expect(fwd.host_port).to.be.above(1023);
      // The added forward reaches the guest's agent port.
      expect(await s.answers('c5', { ...h, agent_port: fwd.host_port })).to.equal(true);
      const busy = createServer();
      await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
      try {
        const port = (busy.address() as AddressInfo).port;
        expect(
          await s.hv.addForwards(sp, [{ host_port: port, guest_port: 80, proto: 'tcp' }]).catch((e) => e),
        ).to.be.instanceOf(AlreadyExistsError);
      } finally {
        busy.close();
      }
      await s.hv.kill(sp);
      expect(s.live()).not.to.include('c5');
      await s.hv.kill(sp);
      expect(
        await s.hv.addForwards(sp, [{ host_port: 0, guest_port: 80, proto: 'tcp' }]).catch((e) => e),
      ).to.be.instanceOf(InvalidStateError);
      expect(exits.filter(([n]) => n === 'c5')).to.deep.equal([]);
      await s.hv.destroy(sp);
    });

    it('re-attaches to a running VM from the handle a record kept, and finds nothing once it is gone', async function () {
      this.timeout(s.bootMs + 60_000);
      const sp = spec('c4');
      await s.hv.provision(sp);
      const h = await s.hv.launch(sp);
      await s.waitUp('c4', h, s.bootMs);
      const saved: VmHandle = JSON.parse(JSON.stringify(h)) as VmHandle;
      s.hv = await s.restart();
      s.hv.onExit((n, r) => exits.push([n, r]));
      const again = await s.hv.reattach(sp, saved);
      expect(again).not.to.equal(null);
      expect(agentAt(again!)).to.equal(agentAt(h));
      expect(s.live()).to.include('c4');
      expect(await s.answers('c4', again!)).to.equal(true);
      await s.hv.pause(sp);
      await s.hv.resume(sp);
      await s.hv.kill(sp);
      expect(await s.hv.reattach(sp, saved)).to.equal(null);
      await s.hv.destroy(sp);
    });

    it('destroys a VM it never re-attached to (a crash before its record was saved): nothing keeps running', async function () {
      this.timeout(s.bootMs + 60_000);
      const sp = spec('orphan');
      await s.hv.provision(sp);
      const h = await s.hv.launch(sp);
      await s.waitUp('orphan', h, s.bootMs);
      s.hv = await s.restart();
      s.hv.onExit((n, r) => exits.push([n, r]));
      await s.hv.destroy(sp);
      expect(await s.answers('orphan', h)).to.equal(false);
      expect(s.live()).not.to.include('orphan');
      await s.hv.destroy(sp); // idempotent
    });

    it('reports a process that dies on its own, and destroy is idempotent', async function () {
      this.timeout(s.bootMs + 60_000);
      const sp = spec('c1');
      const h = await s.hv.launch(sp);
      await s.crash('c1', h);
      await poll(() => exits.some(([n]) => n === 'c1'), { ms: 5000, every: 100 });
      expect(exits.find(([n]) => n === 'c1')?.[1]).to.be.a('string');
      expect(s.live()).not.to.include('c1');
      await s.hv.destroy(sp);
      await s.hv.destroy(sp);
    });
  });
}
