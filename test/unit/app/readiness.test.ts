import { expect } from 'chai';
import { cloudInitState, waitReady } from '../../../src/app/readiness.js';
import type { VmRecord } from '../../../src/domain/vm.js';
import type { RemoteResult } from '../../../src/ports/tunnels.js';
import { SystemClock } from '../../../src/adapters/clock/system-clock.js';

describe('app/readiness: wait=userdata on an image without an agent (cloud-init over SSH)', () => {
  it('reads cloud-init status: done, failed with its detail, running, and missing', () => {
    expect(cloudInitState('status: done\ntime: Mon\ndetail:\nDataSourceNoCloud [seed=/dev/vdb]\n')).to.deep.equal({
      done: true,
    });
    expect(cloudInitState('status: running\n')).to.equal(undefined);
    expect(cloudInitState('')).to.equal(undefined);
    const failed = cloudInitState(
      "status: error\ntime: Mon\ndetail:\n('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))\n",
    );
    expect(failed)
      .to.have.property('failed')
      .that.matches(/cloud-init reports error: .*scripts_user.*part-001/);
    expect(cloudInitState('sh: 1: cloud-init: not found\n'))
      .to.have.property('failed')
      .that.matches(/no cloud-init/);
  });

  it('waits for ssh, then asks cloud-init until it is done, and fails the wait when cloud-init failed', async () => {
    const record = { name: 'c1', ssh_port: 2222, agent_port: 0, agent_cid: 0 } as VmRecord;
    const run = async (answers: RemoteResult[]) => {
      const asked: string[] = [];
      const phases: string[] = [];
      const clock = new SystemClock();
      await waitReady(
        {
          agent: {} as never,
          clock: { now: () => clock.now(), sleep: async () => undefined },
          ssh: { ready: async () => true },
          remote: {
            exec: async (t, cmd) => {
              asked.push(`${t.user}@${t.port}: ${cmd}`);
              const a = answers.shift();
              if (!a) throw new Error('ssh refused');
              return a;
            },
          },
        },
        {
          record,
          mode: 'userdata',
          deadline: Date.now() + 5000,
          phase: (p) => phases.push(p),
          died: () => undefined,
          sshUser: 'debian',
        },
      );
      return { asked, phases };
    };
    const ok = await run([
      { code: 0, stdout: 'status: running\n', stderr: '' },
      { code: 0, stdout: 'status: done\n', stderr: '' },
    ]);
    expect(ok.phases).to.deep.equal(['wait_ssh', 'userdata']);
    expect(ok.asked).to.have.length(2);
    expect(ok.asked[0]).to.match(/^debian@2222: cloud-init status --long/);
    const err = await run([{ code: 1, stdout: 'status: error\ndetail:\nboom\n', stderr: '' }]).catch((e: unknown) => e);
    expect((err as Error).message).to.match(/vm c1: user-data failed: cloud-init reports error: .*boom/);
  });
});
