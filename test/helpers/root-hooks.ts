import { appendFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Context } from 'mocha';
import { removeTempDirs } from './temp-dirs.js';

/** Where each test file's seconds go, one `SECONDS\tFILE` line each (scripts/test.sh sets it). */
const FILE_TIMES = process.env.SVC_FILE_TIMES;
let fileStarted = 0;

/** The one file a root suite holds (a parallel run's worker runs one at a time), or undefined. */
function onlyFile(context: Context): string | undefined {
  const root = context.test?.parent;
  const files = new Set(root?.suites.map((s) => s.file).filter((f): f is string => !!f));
  return files.size === 1 ? [...files][0] : undefined;
}

/**
 * Mocha's root hooks (.mocharc.cjs requires this file for every run). After each test file (in a
 * parallel run; after the whole run otherwise) its temp directories go. Left to the exit of a
 * parallel run's worker, which ran many files, they went only as far as the second the worker is
 * given to exit before it is killed: a clean-clone run left 28 behind. With SVC_FILE_TIMES set, a
 * parallel run also writes each file's time there, so a tier's slowest files can be told.
 */
export const mochaHooks = {
  beforeAll(): void {
    fileStarted = Date.now();
  },
  afterAll(this: Context): void {
    removeTempDirs();
    const file = FILE_TIMES ? onlyFile(this) : undefined;
    if (FILE_TIMES && file) {
      const seconds = ((Date.now() - fileStarted) / 1000).toFixed(1);
      appendFileSync(FILE_TIMES, `${seconds}\t${relative(process.cwd(), file)}\n`);
    }
  },
};
