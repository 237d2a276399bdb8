import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLOUD_INIT_POLL, cloudInitState, waitReady } from '../../../src/app/readiness.js';
import type { VmRecord } from '../../../src/domain/vm.js';
import type { RemoteResult } from '../../../src/ports/tunnels.js';
import { SystemClock } from '../../../src/adapters/clock/system-clock.js';

describe('app/readiness: wait=userdata on an image without an agent (cloud-init over SSH)', () => {
  it('polls with a shell alone: running, disabled, missing, and the result file once it is there', () => {
    // Run by this host's sh with a PATH of its own, the poll's two absolute paths moved under a
    // temporary folder (this host may run cloud-init itself): its syntax and each of its branches.
    const dir = mkdtempSync(join(tmpdir(), 'svc-ci-poll-'));
    const bin = join(dir, 'bin');
    const run = join(dir, 'run');
    const etc = join(dir, 'etc');
    try {
      for (const d of [bin, run, etc]) mkdirSync(d);
      symlinkSync(execFileSync('/bin/sh', ['-c', 'command -v head'], { encoding: 'utf8' }).trim(), join(bin, 'head'));
      const script = CLOUD_INIT_POLL.replaceAll('/run/cloud-init/', `${run}/`).replaceAll('/etc/cloud/', `${etc}/`);
      expect(script).not.to.match(/\/run\/cloud-init\/|\/etc\/cloud\//);
      const poll = () =>
        cloudInitState(execFileSync('/bin/sh', ['-c', script], { env: { PATH: bin }, encoding: 'utf8' }));
      expect(poll(), 'no cloud-init in the guest').to.deep.equal({
        failed: 'the guest has no cloud-init to wait for (wait=userdata needs it)',
      });
      // A cloud-init that would be run says so: the poll must not start it.
      writeFileSync(join(bin, 'cloud-init'), '#!/bin/sh\necho "result:"; echo \'{"v1":{"errors":["ran"]}}\'\n');
      chmodSync(join(bin, 'cloud-init'), 0o755);
      expect(poll(), 'running').to.equal(undefined);
      writeFileSync(join(etc, 'cloud-init.disabled'), '');
      expect(poll()).to.deep.equal({ failed: 'cloud-init is disabled in the guest (wait=userdata needs it)' });
      rmSync(join(etc, 'cloud-init.disabled'));
      writeFileSync(join(run, 'disabled'), '');
      expect(poll())
        .to.have.property('failed')
        .that.matches(/disabled/);
      rmSync(join(run, 'disabled'));
      writeFileSync(
        join(run, 'result.json'),
        '{\n "v1": {\n  "datasource": "DataSourceNoCloud",\n  "errors": []\n }\n}\n',
      );
      expect(poll()).to.deep.equal({ done: true });
      writeFileSync(
        join(run, 'result.json'),
        JSON.stringify({ v1: { errors: ["('scripts_user', RuntimeError('x'))"] } }),
      );
      expect(poll())
        .to.have.property('failed')
        .that.matches(/cloud-init reports error: .*scripts_user/);
      // A result file larger than the poll reads is cut, and so not JSON: a failure that says so.
      writeFileSync(join(run, 'result.json'), JSON.stringify({ v1: { errors: Array(2000).fill('e'.repeat(20)) } }));
      expect(poll())
        .to.have.property('failed')
        .that.matches(/^cloud-init's result file is not JSON: \{"v1"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads the answer: a result with or without errors, running, disabled, missing, and nonsense', () => {
    expect(
      cloudInitState('result:\n{"v1":{"datasource":"DataSourceNoCloud [seed=/dev/vdb]","errors":[]}}\n'),
    ).to.deep.equal({
      done: true,
    });
    // what a login shell printed first does not hide the result
    expect(cloudInitState('welcome\nresult:\n{"v1":{"errors":[]}}')).to.deep.equal({ done: true });
    expect(cloudInitState('no result:\nresult:\n{"v1":{"errors":[]}}')).to.deep.equal({ done: true });
    expect(cloudInitState('status: running\n')).to.equal(undefined);
    expect(cloudInitState('')).to.equal(undefined);
    const failed = cloudInitState(
      'result:\n{"v1":{"errors":["(\'scripts_user\', RuntimeError(\'Runparts: 1 failures (part-001) in 1 attempted commands\'))"]}}',
    );
    expect(failed)
      .to.have.property('failed')
      .that.matches(/cloud-init reports error: .*scripts_user.*part-001/);
    expect(cloudInitState('result:\n{"v1":{}}'))
      .to.have.property('failed')
      .that.matches(/no errors list/);
    expect(cloudInitState('result:\n'))
      .to.have.property('failed')
      .that.matches(/not JSON/);
    expect(cloudInitState('cloud-init: not found\n'))
      .to.have.property('failed')
      .that.matches(/no cloud-init/);
    expect(cloudInitState('status: disabled\n'))
      .to.have.property('failed')
      .that.matches(/disabled/);
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
      { code: 0, stdout: 'result:\n{"v1":{"errors":[]}}\n', stderr: '' },
    ]);
    expect(ok.phases).to.deep.equal(['wait_ssh', 'userdata']);
    expect(ok.asked).to.have.length(2);
    expect(ok.asked[0]).to.equal(`debian@2222: ${CLOUD_INIT_POLL}`);
    const err = await run([{ code: 0, stdout: 'result:\n{"v1":{"errors":["boom"]}}', stderr: '' }]).catch(
      (e: unknown) => e,
    );
    expect((err as Error).message).to.match(/vm c1: user-data failed: cloud-init reports error: .*boom/);
  });
});
