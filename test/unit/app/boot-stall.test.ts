import { expect } from 'chai';
import { BootStallRule, watchBootStall } from '../../../src/app/boot-stall.js';
import type { Clock } from '../../../src/ports/clock.js';
import type { ConsoleLogs } from '../../../src/ports/stores.js';

/** A clock whose sleeps pass at once, moving its time on. */
function virtualClock(): Clock {
  let t = 1_000_000;
  return {
    now: () => t,
    sleep: async (ms) => {
      t += ms;
      await new Promise((r) => setImmediate(r));
    },
  };
}

describe('a guest that hangs while it boots', () => {
  it('is busy while its console grows or its CPU works, and hangs after quietMs of neither', () => {
    const rule = new BootStallRule(5000);
    let cpu = 0;
    let out = 0;
    const at = (s: number) => ({ at: s * 1000, console_bytes: out, cpu_ms: cpu });
    expect(rule.observe(at(0))).to.equal(undefined);
    // Busy on the CPU (TCG translating the kernel), silent: not hanging, however long.
    for (let s = 1; s <= 20; s++) {
      cpu += 900;
      expect(rule.observe(at(s)), `second ${s}`).to.equal(undefined);
    }
    // Idle but printing (a guest that waits and says so): not hanging either.
    for (let s = 21; s <= 40; s++) {
      out += 80;
      cpu += 5;
      expect(rule.observe(at(s)), `second ${s}`).to.equal(undefined);
    }
    // Idle and silent: hangs once 5 s have passed since it last did anything (its timer ticks are not work).
    for (let s = 41; s <= 44; s++) {
      cpu += 50;
      expect(rule.observe(at(s)), `second ${s}`).to.equal(undefined);
    }
    cpu += 50;
    expect(rule.observe(at(45))).to.equal(
      'the guest hangs: its console printed nothing and it used almost no CPU for 5 s (config boot_stall_timeout)',
    );
  });

  it('a CPU share above a tenth of the time between samples is work', () => {
    const rule = new BootStallRule(2000);
    rule.observe({ at: 0, console_bytes: 0, cpu_ms: 0 });
    expect(rule.observe({ at: 1000, console_bytes: 0, cpu_ms: 101 })).to.equal(undefined);
    expect(rule.observe({ at: 2000, console_bytes: 0, cpu_ms: 202 })).to.equal(undefined);
    expect(rule.observe({ at: 3000, console_bytes: 0, cpu_ms: 300 })).to.equal(undefined);
    expect(rule.observe({ at: 4000, console_bytes: 0, cpu_ms: 400 })).to.match(/hangs: .* for 2 s/);
  });

  it('is watched by sampling the console and the process until a verdict, and stops when the process is gone', async () => {
    const clock = virtualClock();
    const consoles = { size: async () => 120 } as unknown as ConsoleLogs;
    const idle = watchBootStall({ consoles, meter: { cpuMs: async () => 10 }, clock }, 'v', 42, 3000);
    for (let i = 0; i < 50 && !idle.verdict(); i++) await new Promise((r) => setImmediate(r));
    expect(idle.verdict()).to.match(/^the guest hangs: .* for 3 s/);

    let calls = 0;
    const gone = watchBootStall(
      {
        consoles,
        meter: {
          cpuMs: async () => {
            calls++;
            return calls < 2 ? 10 : undefined;
          },
        },
        clock,
      },
      'v',
      42,
      1000,
    );
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(gone.verdict(), 'a process that died is the crash watch’s to report').to.equal(undefined);
    expect(calls).to.equal(2);

    let sampled = 0;
    const stopped = watchBootStall(
      {
        consoles,
        meter: {
          cpuMs: async () => {
            sampled++;
            return 10;
          },
        },
        clock,
      },
      'v',
      42,
      60_000,
    );
    await new Promise((r) => setImmediate(r));
    stopped.stop();
    const at = sampled;
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(sampled - at, 'no sample after stop').to.be.at.most(1);
    expect(stopped.verdict()).to.equal(undefined);
  });
});
