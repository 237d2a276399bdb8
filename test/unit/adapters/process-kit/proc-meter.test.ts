import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpuBounded, ProcMeter, statCpuMs } from '../../../../src/adapters/process-kit/proc-meter.js';

describe('ProcMeter: a host process CPU time', () => {
  it('reads utime and stime in ticks of 10 ms, counting fields after the last parenthesis', () => {
    // A command name with spaces and parentheses of its own, as `-name ...,process=` may give.
    const line = '4242 (qemu (svc) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 25 0 0 20 0 3 0 100 0 0';
    expect(statCpuMs(line)).to.equal(1750);
    expect(statCpuMs('no parenthesis here')).to.equal(undefined);
    expect(statCpuMs('1 (x) S 1 2')).to.equal(undefined);
  });

  it('measures this process, and says nothing of one that is not there', async () => {
    const meter = new ProcMeter();
    const before = (await meter.cpuMs(process.pid))!;
    // Spin for 120 ms of this process's own CPU time, however long a loaded host takes to give it
    // (a wall-clock loop got 40 ms of CPU in a CI run with images building beside).
    const c0 = process.cpuUsage();
    let x = 0;
    for (;;) {
      for (let i = 0; i < 10_000; i++) x += Math.sqrt(x + 1);
      const used = process.cpuUsage(c0);
      if ((used.user + used.system) / 1000 >= 120) break;
    }
    expect(x).to.be.above(0);
    const after = (await meter.cpuMs(process.pid))!;
    // /proc counts in 10 ms ticks: within a tick or two of what the process says it used
    expect(after - before).to.be.at.least(100);
    expect(await meter.cpuMs(2 ** 22 + 7)).to.equal(undefined);
  });

  describe('cpuBounded: work bounded by the CPU a process spends on it', function () {
    // a spinning child on a busy host may take long to spend its bound (the wall bound is 20 s)
    this.timeout(25_000);
    const children: ChildProcess[] = [];
    const run = (script: string) => {
      const c = spawn('sh', ['-c', script], { stdio: 'ignore' });
      children.push(c);
      return c.pid!;
    };
    const never = new Promise<never>(() => {});
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    afterEach(() => {
      for (const c of children.splice(0)) c.kill('SIGKILL');
    });

    it('lets an idle process take longer than its CPU bound, and gives the answer', async () => {
      const pid = run('exec sleep 30');
      const answer = sleep(1200).then(() => 'answered');
      expect(await cpuBounded(answer, pid, { cpuMs: 100, wallMs: 10_000, everyMs: 50 })).to.equal('answered');
    });

    it('gives up on a process that spins, once it spent the CPU bound', async () => {
      const pid = run('while :; do :; done');
      const t0 = Date.now();
      const err = await cpuBounded(never, pid, { cpuMs: 200, wallMs: 20_000, everyMs: 50 }).catch((e: Error) => e);
      expect((err as Error).message).to.match(/^no answer after \d+ ms of CPU time$/);
      expect(Date.now() - t0).to.be.below(20_000);
    });

    it('gives up on an idle process at the wall bound', async () => {
      const pid = run('exec sleep 30');
      const err = await cpuBounded(never, pid, { cpuMs: 10_000, wallMs: 400, everyMs: 50 }).catch((e: Error) => e);
      expect((err as Error).message).to.equal('no answer within 400 ms');
    });
  });
});
