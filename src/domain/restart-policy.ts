import { InvalidArgumentError, shown } from './errors.js';

/**
 * Restart policies (docs/processes.md, "Restarting"): of a durable process (POST /processes
 * `restart`, `max_restarts`) and of a VM's image entrypoint (POST /vms `entrypoint`).
 */

export type RestartPolicy = 'always' | 'on-failure';

/** The most `max_restarts` may say. */
export const MAX_RESTARTS = 1_000_000;

/** A restart policy as POST /processes and POST /vms's `entrypoint` carry it. */
export interface EntrypointRestart {
  restart: RestartPolicy;
  max_restarts?: number;
}

/**
 * How a VM runs its image's entrypoint, when not as it is: `false`, not at all; a restart policy,
 * started again by it (POST /vms `entrypoint`; docs/image.md, "What runs at boot").
 */
export type EntrypointChoice = false | EntrypointRestart;

/**
 * `restart` and `max_restarts` of a body: none for `restart` absent or "no". `started` says whether
 * the process has a terminal or input, which a restart cannot hand on.
 */
export function parseRestart(
  b: Record<string, unknown>,
  started: { pty?: unknown; stdin?: boolean } = {},
): Partial<EntrypointRestart> {
  const out: Partial<EntrypointRestart> = {};
  if (b.restart !== undefined && b.restart !== 'no' && b.restart !== null) {
    if (b.restart !== 'always' && b.restart !== 'on-failure')
      throw new InvalidArgumentError('restart must be "no", "always" or "on-failure"');
    if (started.pty || started.stdin)
      throw new InvalidArgumentError('restart is for processes without a terminal (pty) or input (stdin)');
    out.restart = b.restart;
  }
  if (b.max_restarts !== undefined && b.max_restarts !== null) {
    const n = b.max_restarts;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > MAX_RESTARTS)
      throw new InvalidArgumentError(`max_restarts must be an integer from 0 to ${MAX_RESTARTS}`);
    if (!out.restart) throw new InvalidArgumentError('max_restarts needs restart ("always" or "on-failure")');
    out.max_restarts = n;
  }
  return out;
}

/** POST /vms `entrypoint`: true, false, or `{restart, max_restarts?}`; true comes back as undefined (as it is). */
export function parseEntrypointChoice(v: unknown): EntrypointChoice | undefined {
  if (v === true) return undefined;
  if (v === false) return false;
  if (!v || typeof v !== 'object' || Array.isArray(v))
    throw new InvalidArgumentError(`entrypoint must be a boolean or {restart, max_restarts?}, got ${shown(v)}`);
  const b = v as Record<string, unknown>;
  for (const k of Object.keys(b))
    if (k !== 'restart' && k !== 'max_restarts') throw new InvalidArgumentError(`unknown field entrypoint.${k}`);
  const r = parseRestart(b);
  if (!r.restart) return undefined; // restart "no": as it is
  return { restart: r.restart, ...(r.max_restarts !== undefined ? { max_restarts: r.max_restarts } : {}) };
}

/** A choice in one word: what tells image snapshots made for different choices apart (their keys). */
export function entrypointWord(choice?: EntrypointChoice): string {
  if (choice === false) return 'no-entrypoint';
  if (!choice) return '';
  return `entrypoint-restart-${choice.restart}${choice.max_restarts !== undefined ? `-${choice.max_restarts}` : ''}`;
}
