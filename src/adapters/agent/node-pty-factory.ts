import { existsSync } from 'node:fs';
import { injectable } from 'inversify';
import pty from 'node-pty';
import type { PtyFactory, PtyOptions, PtySession } from '../../ports/agent/pty.js';

/** Real pseudo-terminals through node-pty. */
@injectable()
export class NodePtyFactory implements PtyFactory {
  defaultShell(): string {
    for (const s of [process.env.SHELL, '/bin/bash', '/bin/sh']) if (s && existsSync(s)) return s;
    return '/bin/sh';
  }

  open(opts: PtyOptions): PtySession {
    const p = pty.spawn(opts.shell, [], {
      name: 'xterm-256color',
      cols: opts.cols,
      rows: opts.rows,
      cwd: opts.cwd ?? process.env.HOME ?? '/',
      env: { ...process.env, TERM: 'xterm-256color', ...opts.env } as Record<string, string>,
      encoding: null,
      ...(opts.uid !== undefined ? { uid: opts.uid, gid: opts.gid } : {}),
    });
    let dead = false;
    p.onExit(() => {
      dead = true;
    });
    return {
      pid: p.pid,
      write: (d) => p.write(d),
      resize: (c, r) => {
        if (!dead) p.resize(c, r);
      },
      onData: (l) => void p.onData((d: string | Buffer) => l(typeof d === 'string' ? Buffer.from(d, 'utf8') : d)),
      // node-pty gives a shell killed by a signal exit code 0 and the signal apart: 128 + the
      // signal, as a shell says of its children, so a killed shell never looks like a clean exit
      onExit: (l) => void p.onExit((e) => l(e.signal ? 128 + e.signal : e.exitCode)),
      kill: () => {
        if (dead) return;
        dead = true;
        try {
          p.kill('SIGHUP');
        } catch {
          // already gone
        }
      },
    };
  }
}
