export const ProcessMeter = Symbol('ProcessMeter');

/** How busy a host process is: what tells a guest that hangs from one that boots slowly. */
export interface ProcessMeter {
  /** CPU time (user and system, all threads) process `pid` has used so far, in ms; undefined when it is gone. */
  cpuMs(pid: number): Promise<number | undefined>;
}
