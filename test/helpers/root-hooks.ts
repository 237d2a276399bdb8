import { removeTempDirs } from './temp-dirs.js';

/**
 * Mocha's root hooks (.mocharc.cjs requires this file for every run). After each test file (in a
 * parallel run; after the whole run otherwise) its temp directories go. Left to the exit of a
 * parallel run's worker, which ran many files, they went only as far as the second the worker is
 * given to exit before it is killed: a clean-clone run left 28 behind.
 */
export const mochaHooks = {
  afterAll(): void {
    removeTempDirs();
  },
};
