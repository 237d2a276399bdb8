import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made = new Set<string>();
let atExit = false;

/**
 * A fresh directory under the system's temp dir (or `base`), removed once the test file that made
 * it has run (the root hook of root-hooks.ts), and at the latest when the test process exits.
 * SVC_TEST_KEEP=1 keeps them to look at.
 */
export function tempDir(prefix = 'svc-test-', base = tmpdir()): string {
  const dir = mkdtempSync(join(base, prefix));
  if (!atExit) {
    atExit = true;
    process.once('exit', removeTempDirs);
  }
  made.add(dir);
  return dir;
}

/**
 * Removes every directory `tempDir` made so far. Each is tried on its own: one that cannot go (a
 * process of a test still writing in it) does not keep the others.
 */
export function removeTempDirs(): void {
  if (process.env.SVC_TEST_KEEP) return;
  for (const dir of made) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 2 });
    } catch {
      // left for the system's temp cleaner
    }
    made.delete(dir);
  }
}
