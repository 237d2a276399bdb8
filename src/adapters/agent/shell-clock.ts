import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);
const STATUS = 'svc-clock ';
const TIMEOUT_MS = 10_000;

/** A word for sh: single-quoted, quotes inside closed and reopened. */
const word = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

interface Helper {
  proc: ChildProcess;
  /** Lines `date` printed (its complaint) before the status line of the command in flight. */
  said: string[];
  waiting?: { resolve: (status: number) => void; reject: (err: Error) => void };
}

/**
 * Sets the clock with `date -u -s @SECONDS`, run by one long-lived `sh` the agent keeps.
 *
 * Starting a process from the agent's Node forks a process of a hundred-odd MiB; a shell forks a
 * small one. That matters where the clock is set: first thing in a guest restored from a saved state
 * (a clone, a suspended VM coming back), where under TCG every path runs untranslated again. The
 * shell started the first time survives in the saved state, so a restored guest already has it
 * (measured in a running TCG guest: 30 ms a `date` from Node, 5 ms through the shell). If the shell
 * is gone or will not answer, the clock is set the plain way and the next call starts a new shell.
 */
export class ShellClock {
  private helper?: Helper;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly sh: string = 'sh', private readonly date: string = 'date') {}

  /** Sets the clock to `seconds` since the epoch (UTC); calls run one after another. */
  set(seconds: number): Promise<void> {
    if (!Number.isSafeInteger(seconds) || seconds < 0) return Promise.reject(new Error(`not a time: ${seconds}`));
    const next = this.queue.then(() => this.setNow(seconds));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Ends the shell (the agent's shutdown, tests). */
  close(): void {
    this.helper?.proc.kill();
    this.helper = undefined;
  }

  private async setNow(seconds: number): Promise<void> {
    let status: number;
    let said: string[];
    try {
      const h = this.helper ?? this.start();
      h.said = [];
      status = await this.ask(h, `${word(this.date)} -u -s @${seconds} 2>&1 >/dev/null; echo "${STATUS}$?"\n`);
      said = h.said;
    } catch {
      this.close();
      await run(this.date, ['-u', '-s', `@${seconds}`]);
      return;
    }
    if (status !== 0) throw new Error(`${this.date} exited with ${status}: ${said.join(' ').slice(0, 300)}`);
  }

  private start(): Helper {
    const proc = spawn(this.sh, [], { stdio: ['pipe', 'pipe', 'ignore'] });
    const h: Helper = { proc, said: [] };
    let buf = '';
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => {
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.startsWith(STATUS)) {
          if (h.said.length < 20) h.said.push(line);
          continue;
        }
        const w = h.waiting;
        h.waiting = undefined;
        w?.resolve(Number(line.slice(STATUS.length)));
      }
      if (buf.length > 4096) buf = '';
    });
    const gone = (err: Error) => {
      if (this.helper === h) this.helper = undefined;
      const w = h.waiting;
      h.waiting = undefined;
      w?.reject(err);
    };
    proc.on('error', gone);
    proc.on('exit', () => gone(new Error('the clock shell exited')));
    proc.stdin!.on('error', () => undefined);
    // The agent's own exit must not wait for it; the shell ends when its input closes.
    proc.unref();
    for (const s of [proc.stdin, proc.stdout]) (s as unknown as { unref?: () => void }).unref?.();
    this.helper = h;
    return h;
  }

  private ask(h: Helper, line: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        h.waiting = undefined;
        reject(new Error('the clock shell did not answer'));
      }, TIMEOUT_MS);
      h.waiting = {
        resolve: (n) => { clearTimeout(timer); resolve(n); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      };
      h.proc.stdin!.write(line);
    });
  }
}
