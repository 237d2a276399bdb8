import { readFile } from 'node:fs/promises';
import { injectable } from 'inversify';
import type { ProcessMeter } from '../../ports/process-meter.js';

/** Linux reports process times in clock ticks of USER_HZ, which is 100 on every architecture it runs on. */
const MS_PER_TICK = 10;

/**
 * `utime` and `stime` (fields 14 and 15) of a `/proc/PID/stat` line, in ms. The command name
 * (field 2) is in parentheses and may hold spaces and parentheses itself, so fields are counted
 * from the last `)`. Undefined for a line that is not one.
 */
export function statCpuMs(line: string): number | undefined {
  const close = line.lastIndexOf(')');
  if (close < 0) return undefined;
  // After ")": field 3 (state) is the first, so utime (14) is the 12th and stime (15) the 13th.
  const fields = line
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const [utime, stime] = [Number(fields[11]), Number(fields[12])];
  if (!Number.isSafeInteger(utime) || !Number.isSafeInteger(stime)) return undefined;
  return (utime + stime) * MS_PER_TICK;
}

/** Reads a process's CPU time from `/proc`. */
@injectable()
export class ProcMeter implements ProcessMeter {
  async cpuMs(pid: number): Promise<number | undefined> {
    const line = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
    return line === undefined ? undefined : statCpuMs(line);
  }
}

/**
 * `p`, or a rejection once the process `pid` has spent `cpuMs` of CPU time since the call (read
 * every `everyMs`), or `wallMs` have passed: a bound for work a process does that holds up on a
 * busy host when the process gets little CPU, and is wrong when it spins.
 */
export async function cpuBounded<T>(
  p: Promise<T>,
  pid: number,
  o: { cpuMs: number; wallMs: number; everyMs?: number },
): Promise<T> {
  const meter = new ProcMeter();
  const t0 = Date.now();
  const cpu0 = meter.cpuMs(pid);
  let over = false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    const check = async () => {
      const [from, now] = [(await cpu0) ?? 0, await meter.cpuMs(pid)];
      if (over) return;
      const spent = (now ?? from) - from;
      if (spent > o.cpuMs) return reject(new Error(`no answer after ${spent} ms of CPU time`));
      if (Date.now() - t0 > o.wallMs) return reject(new Error(`no answer within ${o.wallMs} ms`));
      timer = setTimeout(() => void check(), o.everyMs ?? 250);
    };
    timer = setTimeout(() => void check(), o.everyMs ?? 250);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    over = true;
    clearTimeout(timer);
  }
}
