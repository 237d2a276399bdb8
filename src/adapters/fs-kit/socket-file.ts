import { connect } from 'node:net';

/**
 * Does something accept connections on the Unix socket at `path` right now? A program that owns
 * a socket path asks before it replaces the file: a live one means another copy of it runs, a
 * dead one is a stale file left by a crash.
 */
export function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
