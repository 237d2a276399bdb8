import { readFile, statfs } from 'node:fs/promises';
import { cpus } from 'node:os';
import { injectable } from 'inversify';
import type { GuestStats } from '../../domain/agent.js';
import type { StatsSource } from '../../ports/agent/guest-files.js';

/** Stats from /proc (uptime, loadavg, meminfo) and statfs of `/`. */
@injectable()
export class ProcStatsSource implements StatsSource {
  constructor(
    private readonly root = '/proc',
    private readonly diskPath = '/',
  ) {}

  async read(): Promise<GuestStats> {
    const [uptime, load, mem] = await Promise.all([
      readFile(`${this.root}/uptime`, 'utf8'),
      readFile(`${this.root}/loadavg`, 'utf8'),
      readFile(`${this.root}/meminfo`, 'utf8'),
    ]);
    const l = load.trim().split(/\s+/).map(Number);
    const kb = (key: string) => {
      const m = new RegExp(`^${key}:\\s+(\\d+)\\s*kB`, 'm').exec(mem);
      return m ? Number(m[1]) * 1024 : 0;
    };
    const out: GuestStats = {
      uptime_sec: Number(uptime.split(/\s+/)[0]),
      load1: l[0],
      load5: l[1],
      load15: l[2],
      cpus: cpus().length || 1,
      mem_total_bytes: kb('MemTotal'),
      mem_available_bytes: kb('MemAvailable') || kb('MemFree'),
    };
    try {
      const s = await statfs(this.diskPath);
      out.disk_total_bytes = s.blocks * s.bsize;
      out.disk_free_bytes = s.bavail * s.bsize;
    } catch {
      // disk fields are optional
    }
    return out;
  }
}
