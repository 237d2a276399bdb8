import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { BACKGROUND_NICE, runInBackground } from '../../../../../src/adapters/hypervisor/qemu/qemu-spawn.js';

/** The nice value of each thread of `pid` (field 19 of /proc/PID/task/TID/stat, after the command's parentheses). */
const niceOf = (pid: number) =>
  readdirSync(`/proc/${pid}/task`).map((tid) =>
    Number(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1].split(' ')[16]),
  );

describe('adapters/hypervisor/qemu runInBackground', () => {
  it('lowers the priority of every thread of a running process, and of the threads it starts later', async () => {
    // A Node process: several threads from the start, and a worker thread started after the change.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `process.stdin.once('data', () => { new (require('worker_threads').Worker)('setInterval(() => {}, 1000)', { eval: true }); console.log('started'); }); setInterval(() => {}, 1000);`,
      ],
      { stdio: ['pipe', 'pipe', 'ignore'] },
    );
    try {
      await new Promise((r) => setTimeout(r, 300));
      const pid = child.pid!;
      expect(niceOf(pid).length).to.be.greaterThan(1);
      runInBackground(pid);
      expect(new Set(niceOf(pid))).to.deep.equal(new Set([BACKGROUND_NICE]));
      const before = niceOf(pid).length;
      child.stdin.write('go\n');
      await new Promise((r) => child.stdout.once('data', r));
      await new Promise((r) => setTimeout(r, 200));
      expect(niceOf(pid).length).to.be.greaterThan(before);
      expect(new Set(niceOf(pid))).to.deep.equal(new Set([BACKGROUND_NICE]));
    } finally {
      child.kill();
    }
  });

  it('leaves a process that is gone alone', () => {
    expect(() => runInBackground(2 ** 22 + 4321)).to.not.throw();
  });
});
