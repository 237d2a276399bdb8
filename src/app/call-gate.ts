import { ResourceExhaustedError } from '../domain/errors.js';

/**
 * Caps on concurrent long calls into guests (execs and shells): per VM and in all. A call over a
 * cap is refused at once with ResourceExhaustedError (429, Retry-After) instead of queueing behind
 * calls that may never end; `enter` hands back the one way out.
 */
export class CallGate {
  private readonly perVm = new Map<string, number>();
  private total = 0;

  constructor(
    private readonly maxPerVm: number,
    private readonly maxTotal: number,
  ) {}

  enter(vm: string): () => void {
    const mine = this.perVm.get(vm) ?? 0;
    if (this.maxPerVm && mine >= this.maxPerVm) {
      throw new ResourceExhaustedError(
        `vm ${vm} already runs ${mine} execs and shells (max_execs_per_vm); retry when one ends`,
        1,
      );
    }
    if (this.maxTotal && this.total >= this.maxTotal) {
      throw new ResourceExhaustedError(
        `${this.total} execs and shells are running (max_execs_total); retry when one ends`,
        1,
      );
    }
    this.perVm.set(vm, mine + 1);
    this.total++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.total--;
      const n = (this.perVm.get(vm) ?? 1) - 1;
      if (n > 0) this.perVm.set(vm, n);
      else this.perVm.delete(vm);
    };
  }

  running(vm?: string): number {
    return vm === undefined ? this.total : (this.perVm.get(vm) ?? 0);
  }
}
