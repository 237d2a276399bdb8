import { DeadlineExceededError } from '../domain/errors.js';
import type { Clock } from '../ports/clock.js';

/** `p`, or DeadlineExceededError when the create's `deadline` (a time on `clock`) comes first. */
export function beforeDeadline<T>(clock: Clock, deadline: number, p: Promise<T>): Promise<T> {
  const left = deadline - clock.now();
  if (left <= 0) return Promise.reject(new DeadlineExceededError('create deadline passed'));
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceededError('create deadline passed')), left);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
