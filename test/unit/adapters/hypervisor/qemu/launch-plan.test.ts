import { expect } from 'chai';
import { InternalError } from '../../../../../src/domain/errors.js';
import { SilentLogger } from '../../../../fakes/fakes.js';
import { LOCK_WAIT_MS, restoreInputs, StartRetries } from '../../../../../src/adapters/hypervisor/qemu/launch-plan.js';

const PORT =
  "qemu-system-x86_64: -netdev user,id=net0,hostfwd=tcp:127.0.0.1:40000-:22: could not set up host forwarding rule 'tcp:127.0.0.1:40000-:22'";
const LOCK = 'qemu-system-x86_64: -drive file=/dev/fdset/1: Failed to get "write" lock';
const LOAD = 'qemu-system-x86_64: load of migration failed: Invalid argument';
const PIDFILE = 'qemu-system-x86_64: cannot create PID file: Cannot lock pid file: Resource temporarily unavailable';

describe('adapters/hypervisor/qemu launch plan', () => {
  describe('StartRetries', () => {
    it('starts three times in all while ports are taken, then gives up', () => {
      const r = new StartRetries(false);
      expect([r.after(PORT), r.after(PORT), r.after(PORT)]).to.deep.equal(['again', 'again', 'fail']);
    });

    it('waits for a disk lock ten times without using up the port tries, then gives up', () => {
      const r = new StartRetries(true);
      expect(Array.from({ length: 10 }, () => r.after(LOCK))).to.deep.equal(Array(10).fill('wait'));
      expect(r.restoring, 'still restoring after the waits').to.equal(true);
      expect([r.after(PORT), r.after(PORT)]).to.deep.equal(['again', 'again']);
      // An eleventh locked start is a failure of the restore: cold boot, then the end.
      expect([r.after(LOCK), r.after(LOCK)]).to.deep.equal(['cold', 'fail']);
    });

    it("waits for the pid file's lock as for the disk's (a start right after a shutdown)", () => {
      const r = new StartRetries(false);
      expect([r.after(PIDFILE), r.delayMs]).to.deep.equal(['wait', LOCK_WAIT_MS]);
    });

    it('turns a restore that does not load into one cold boot; a cold boot that fails is the end', () => {
      const r = new StartRetries(true);
      expect(r.after(LOAD)).to.equal('cold');
      expect(r.restoring).to.equal(false);
      expect(r.after(LOAD)).to.equal('fail');
    });

    it('restores four more times, further apart each time, when QEMU dies without a word (its segfault under load), then cold-boots', () => {
      const r = new StartRetries(true);
      const died = 'QMP connection closed';
      const delays = [];
      for (let i = 0; i < 4; i++) {
        expect(r.after(died)).to.equal('again');
        delays.push(r.delayMs);
      }
      expect(delays).to.deep.equal([250, 500, 1000, 2000]);
      expect(r.restoring, 'still restoring').to.equal(true);
      expect([r.after(died), r.after(died)]).to.deep.equal(['cold', 'fail']);
      expect(r.delayMs).to.equal(0);
      expect(new StartRetries(false).after(died), 'a cold boot that dies is the end').to.equal('fail');
    });

    it("says why a launch came up cold, and fails with QEMU's words when nothing is left (next)", async () => {
      const log = new SilentLogger();
      const r = new StartRetries(true);
      await r.next('v', LOAD, log);
      expect([r.restoring, r.coldWhy]).to.deep.equal([false, `the saved state did not load: ${LOAD}`]);
      let err: Error | undefined;
      await r.next('v', LOAD, log).catch((e: Error) => (err = e));
      expect(err).to.be.instanceOf(InternalError);
      expect(err?.message).to.equal(`qemu failed to start vm v: ${LOAD}`);
      const c = new StartRetries(true);
      c.coldBoot('no RAM image here');
      expect([c.restoring, c.coldWhy]).to.deep.equal([false, 'no RAM image here']);
      const again = new StartRetries(true);
      await again.next('v', PORT, log);
      expect([again.restoring, again.coldWhy], 'a taken port keeps restoring').to.deep.equal([true, undefined]);
    });

    it('counts the cold boot as a start: after it, one more taken port is the last try', () => {
      const r = new StartRetries(true);
      expect([r.after(LOAD), r.after(PORT), r.after(PORT)]).to.deep.equal(['cold', 'again', 'fail']);
    });
  });

  describe('restoreInputs', () => {
    it('cold-boots without a saved state', () => {
      expect(restoreInputs('/v', undefined)).to.deep.equal({ args: {}, ramImage: false });
    });

    it('loads an old internal snapshot by its tag', () => {
      expect(restoreInputs('/v', { kind: 'snapshot' })).to.deep.equal({
        args: { loadSnapshot: 'svc-suspend' },
        ramImage: false,
      });
    });

    it('reads a migration stream from descriptor 3', () => {
      expect(restoreInputs('/v', { kind: 'stream', file: 'state.mig' })).to.deep.equal({
        args: { incomingFd: 3 },
        stateFile: '/v/state.mig',
        ramImage: false,
      });
    });

    it('maps a RAM image copy-on-write and loads its device state after QEMU is up', () => {
      expect(restoreInputs('/v', { kind: 'image', base: 'base-0123456789abcdef' })).to.deep.equal({
        args: { incomingFd: 3, ramFile: { path: '/v/base-0123456789abcdef.ram', shared: false }, incomingDefer: true },
        stateFile: '/v/base-0123456789abcdef.dev',
        ramImage: true,
      });
    });
  });
});
