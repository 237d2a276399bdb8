import { expect } from 'chai';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
} from '../../../src/domain/errors.js';
import { world } from '../../fakes/world.js';

describe('app/ForwardService', () => {
  it('adds a live forward to a running vm, records it, and removes it', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'f', persistent: true }, {})
    ).done;
    const fwd = await w.forwards.add('f', { host_port: 0, guest_port: 8000 });
    expect(fwd).to.include({ guest_port: 8000, proto: 'tcp', kind: 'live' });
    expect(w.tunnels.list('f').map((t) => t.host_port)).to.deep.equal([fwd.host_port]);
    expect(w.store.records.get('f')!.forwards.filter((x) => x.kind === 'live')).to.have.length(1);
    expect(w.activity.events.at(-1)).to.include({ action: 'forward.add', target: `f:${fwd.host_port}`, status: 'ok' });
    await w.forwards.remove('f', String(fwd.host_port));
    expect(w.tunnels.list('f')).to.deep.equal([]);
    expect(w.vms.get('f').forwards.filter((x) => x.kind === 'live')).to.deep.equal([]);
  });

  it('refuses udp, a vm that is not running, a host port already forwarded, and a busy port', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'f', persistent: true }, {})
    ).done;
    expect(await w.forwards.add('f', { host_port: 0, guest_port: 53, proto: 'udp' }).catch((e) => e)).to.be.instanceOf(
      InvalidArgumentError,
    );
    await w.forwards.add('f', { host_port: 40123, guest_port: 1 });
    expect(await w.forwards.add('f', { host_port: 40123, guest_port: 2 }).catch((e) => e)).to.be.instanceOf(
      InvalidArgumentError,
    );
    w.tunnels.busy.add(40124);
    expect(await w.forwards.add('f', { host_port: 40124, guest_port: 2 }).catch((e) => e)).to.be.instanceOf(
      AlreadyExistsError,
    );
    expect(w.vms.get('f').forwards.filter((x) => x.kind === 'live')).to.have.length(1);
    await w.svc.pause('f');
    expect(await w.forwards.add('f', { host_port: 0, guest_port: 3 }).catch((e) => e)).to.be.instanceOf(
      InvalidStateError,
    );
    expect(await w.forwards.remove('f', '1').catch((e) => e)).to.be.instanceOf(NotFoundError);
    expect(await w.forwards.remove('f', 'x').catch((e) => e)).to.be.instanceOf(InvalidArgumentError);
  });

  it('closes tunnels when the vm goes down and re-opens them on the same host port when it is up again', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'f', persistent: true }, {})
    ).done;
    const fwd = await w.forwards.add('f', { host_port: 0, guest_port: 8000 });
    await w.svc.suspend('f');
    expect(w.tunnels.list('f')).to.deep.equal([]);
    expect(w.vms.get('f').forwards.find((x) => x.kind === 'live')!.pid).to.equal(undefined);
    await w.svc.restore('f');
    expect(w.tunnels.list('f').map((t) => t.host_port)).to.deep.equal([fwd.host_port]);
    expect(w.vms.get('f').forwards.find((x) => x.kind === 'live')!.pid).to.equal(process.pid);
    await w.svc.delete('f');
    expect(w.tunnels.list('f')).to.deep.equal([]);
  });
});
