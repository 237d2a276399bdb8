import type { Failpoint, Failpoints } from '../../ports/failpoints.js';

/** The armed failpoint: at `point` the daemon writes one line to stderr and dies with SIGKILL, as a crash would. */
export class KillFailpoints implements Failpoints {
  constructor(private readonly point: string) {}

  hit(point: Failpoint): void {
    if (point !== this.point) return;
    process.stderr.write(`svcd: failpoint ${point}: dying now (test_mode)\n`);
    process.kill(process.pid, 'SIGKILL');
  }
}
