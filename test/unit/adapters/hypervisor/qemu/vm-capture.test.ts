import { expect } from 'chai';
import { liveCapture } from '../../../../../src/adapters/hypervisor/qemu/vm-capture.js';

/** A monitor that answers `query-kvm` as told and records what it was asked. */
function monitor(answer: { enabled: boolean; present: boolean } | Error) {
  const asked: string[] = [];
  return {
    asked,
    async execute<T>(cmd: string): Promise<T> {
      asked.push(cmd);
      if (answer instanceof Error) throw answer;
      return answer as T;
    },
  };
}

describe('a capture of a running vm: live only under KVM', () => {
  it('runs the guest on while its memory is sent when QEMU runs it under KVM', async () => {
    const m = monitor({ enabled: true, present: true });
    expect(await liveCapture(m)).to.equal(true);
    expect(m.asked).to.deep.equal(['query-kvm']);
  });

  it('stops it for the whole capture under TCG, where a live stream missed writes, even with KVM present', async () => {
    expect(await liveCapture(monitor({ enabled: false, present: true }))).to.equal(false);
    expect(await liveCapture(monitor({ enabled: false, present: false }))).to.equal(false);
  });

  it('takes the safe side when the monitor cannot say', async () => {
    expect(await liveCapture(monitor(new Error('CommandNotFound')))).to.equal(false);
  });
});
