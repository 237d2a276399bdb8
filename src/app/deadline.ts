import { DeadlineExceededError } from '../domain/errors.js';
import type { Clock } from '../ports/clock.js';

/**
 * `p`, or DeadlineExceededError (`message`) when `deadline` (a time on `clock`: a create's, by
 * default) comes first.
 */
export function beforeDeadline<T>(
  clock: Clock,
  deadline: number,
  p: Promise<T>,
  message = 'create deadline passed',
): Promise<T> {
  const left = deadline - clock.now();
  if (left <= 0) return Promise.reject(new DeadlineExceededError(message));
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceededError(message)), left);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
