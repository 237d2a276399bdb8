import { inject, injectable } from 'inversify';
import { NotFoundError, errorMessage } from '../domain/errors.js';
import { Clock } from '../ports/clock.js';
import { ActivityLog } from '../ports/stores.js';

/**
 * The one way use cases write the activity log: `timed` runs an operation and records it with its
 * duration on the Clock port, `ok` or `error` (a lookup of something that does not exist is not
 * activity); `record` notes something instant.
 */
@injectable()
export class Activity {
  constructor(
    @inject(ActivityLog) private readonly log: ActivityLog,
    @inject(Clock) private readonly clock: Clock,
  ) {}

  /**
   * `targetOf` names the target after success when only the result knows it (an allocated port);
   * `noteOf` gives a success a message (a restore that cold-booted).
   */
  async timed<T>(
    action: string,
    target: string,
    fn: () => Promise<T>,
    { targetOf, noteOf }: { targetOf?: (out: T) => string; noteOf?: (out: T) => string | undefined } = {},
  ): Promise<T> {
    const t0 = this.clock.now();
    try {
      const out = await fn();
      const message = noteOf?.(out);
      this.log.record({
        action,
        target: targetOf ? targetOf(out) : target,
        status: 'ok',
        duration_ms: this.clock.now() - t0,
        ...(message ? { message } : {}),
      });
      return out;
    } catch (err) {
      if (!(err instanceof NotFoundError)) {
        this.log.record({
          action,
          target,
          status: 'error',
          duration_ms: this.clock.now() - t0,
          message: errorMessage(err),
        });
      }
      throw err;
    }
  }

  record(action: string, target: string, status: 'ok' | 'error' = 'ok', message?: string, durationMs = 0): void {
    this.log.record({ action, target, status, duration_ms: durationMs, message });
  }

  flush(): Promise<void> {
    return this.log.flush();
  }
}
