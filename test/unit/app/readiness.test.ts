import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLOUD_INIT_POLL, cloudInitState, waitReady } from '../../../src/app/readiness.js';
import type { VmRecord } from '../../../src/domain/vm.js';
import type { RemoteResult } from '../../../src/ports/tunnels.js';
import { SystemClock } from '../../../src/adapters/clock/system-clock.js';

describe('app/readiness: wait=userdata on an image without an agent (cloud-init over SSH)', () => {
  it('polls with a shell until cloud-init has a result, and asks cloud-init itself then (or when it is missing)', () => {
    // Run by this host's sh, with a PATH of its own: the poll's syntax and both of its branches.
    const bin = mkdtempSync(join(tmpdir(), 'svc-ci-poll-'));
    try {
      const poll = (path: string) =>
        execFileSync('/bin/sh', ['-c', CLOUD_INIT_POLL], { env: { PATH: path }, encoding: 'utf8' });
      expect(cloudInitState(poll(bin)), 'no cloud-init in the guest').to.deep.include({
        failed: 'the guest has no cloud-init to wait for (wait=userdata needs it)',
      });
      writeFileSync(join(bin, 'cloud-init'), '#!/bin/sh\necho "status: done ($*)"\n');
      chmodSync(join(bin, 'cloud-init'), 0o755);
      // A host that runs cloud-init itself has a result file: then the real branch runs.
      const expected = existsSync('/run/cloud-init/result.json') ? 'status: done (status --long)' : 'status: running';
      expect(poll(bin).trim()).to.equal(expected);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

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
    expect(ok.asked[0]).to.equal(`debian@2222: ${CLOUD_INIT_POLL}`);
    const err = await run([{ code: 1, stdout: 'status: error\ndetail:\nboom\n', stderr: '' }]).catch((e: unknown) => e);
    expect((err as Error).message).to.match(/vm c1: user-data failed: cloud-init reports error: .*boom/);
  });
});
