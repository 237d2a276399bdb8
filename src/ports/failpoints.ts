/**
 * Named steps where a test can make the daemon die (SIGKILL) to prove that a crash there loses
 * nothing (docs/architecture.md, "Crash matrix"). Production binds the no-op; the daemon arms one
 * only with `test_mode: true` and `SVC_FAILPOINT=<name>` in its environment.
 */
export const FAILPOINTS = [
  'create.saved',
  'create.disk',
  'create.launched',
  'create.ready',
  'clone.copied',
  'suspend.saving',
  'suspend.streaming',
  'suspend.image',
  'suspend.saved',
  'restore.launched',
  'restore.running',
  'shutdown.stopped',
  'delete.destroyed',
  'claim.renamed',
  'fork.switchover',
] as const;
/**
 * `suspend.streaming`, `suspend.image` and `fork.switchover` are the QEMU adapter's: its guest
 * stopped, the saved stream has begun; a second QEMU has loaded the saved stream to make a RAM
 * image of it; a capture's stream waits in its pause before the switch-over, the guest stopped.
 */
export type Failpoint = (typeof FAILPOINTS)[number];

export const Failpoints = Symbol('Failpoints');
export interface Failpoints {
  /** Does nothing, unless the test armed this point: then the process dies here. */
  hit(point: Failpoint): void;
}

export const NO_FAILPOINTS: Failpoints = { hit: () => undefined };
