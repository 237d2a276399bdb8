import { setTimeout as delay } from 'node:timers/promises';
import { injectable } from 'inversify';
import type { Clock } from '../../ports/clock.js';

@injectable()
export class SystemClock implements Clock {
  now(): number {
    return Date.now();
  }

  sleep(ms: number): Promise<void> {
    return delay(ms);
  }
}
