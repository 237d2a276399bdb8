import { AgentUnavailableError } from '../../domain/errors.js';

/** What a caller is told to wait before trying again once the budget is spent. */
const RETRY_AFTER_S = 1;

/**
 * The daemon-wide budget for guest answers in flight (config `guest_reply_budget_mb`): every
 * answer the daemon reads whole takes its bytes from it as they arrive and gives them back when
 * the read ends. One answer is capped (REPLY_LIMITS); this caps them all together, so many large
 * answers at once (execs, readdirs, across VMs) cannot take the daemon's memory. Past it the call
 * fails as the agent being unavailable, with Retry-After (503).
 */
export class ReplyBudget {
  private used = 0;

  /** `limitBytes` 0: no budget. */
  constructor(readonly limitBytes: number) {}

  get inFlight(): number {
    return this.used;
  }

  /** Takes `n` bytes; false (and nothing taken) when that would pass the budget. */
  take(n: number): boolean {
    if (this.limitBytes && this.used + n > this.limitBytes) return false;
    this.used += n;
    return true;
  }

  give(n: number): void {
    this.used = Math.max(0, this.used - n);
  }

  /** The error for a read the budget refused. */
  spent(): AgentUnavailableError {
    return new AgentUnavailableError(
      `the daemon holds ${Math.round(this.used / 2 ** 20)} MiB of guest answers, its budget (guest_reply_budget_mb); try again shortly`,
      RETRY_AFTER_S,
    );
  }

  /** No budget: what embedders and tests get unless they give one. */
  static readonly NONE = new ReplyBudget(0);
}
