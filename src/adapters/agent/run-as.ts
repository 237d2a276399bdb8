import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { findHelpers } from './fs-kept-processes.js';

/** Who a program runs as: the agent's own user when `uid` is absent. */
export interface RunAs {
  uid?: number;
  gid?: number;
  /** The user's groups, its own gid among them, as login sets them (/etc/group). */
  groups?: number[];
}

/** How to start a program as someone: through native/svc-as, or with the spawn's uid and gid alone. */
export interface StartAs {
  file: string;
  args: string[];
  uid?: number;
  gid?: number;
}

/** svc-as beside the agent's other helpers (findHelpers), or null when the agent was built without it. */
export function findRunAs(helpersDir?: string): string | null {
  const dir = findHelpers(helpersDir);
  return dir && existsSync(join(dir, 'svc-as')) ? join(dir, 'svc-as') : null;
}

/**
 * A start as `who`. Node's spawn and node-pty (libuv) clear a child's supplementary groups when
 * they set its uid, so a user in groups beyond its own goes through `svc-as` (native/svc-as.c),
 * which sets them, then its gid and uid, and execs the program (`program()`: its path, found
 * before: svc-as runs what it is given). Everyone else starts as before, without a second exec.
 */
export function startAs(
  helper: string | null,
  file: string,
  args: string[],
  who: RunAs,
  program: () => string,
): StartAs {
  if (who.uid === undefined) return { file, args };
  const gid = who.gid ?? who.uid;
  const groups = who.groups ?? [];
  if (!helper || !groups.some((g) => g !== gid)) return { file, args, uid: who.uid, gid };
  return { file: helper, args: [String(who.uid), String(gid), groups.join(','), program(), ...args] };
}
