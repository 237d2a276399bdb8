import { execFile, spawn, type ChildProcess } from 'node:child_process';

const STATUS = 'svc-shell ';
const TIMEOUT_MS = 10_000;
const SAID_LINES = 20;

/** What a command line run by the shell left: its exit status and the lines it printed before it. */
export interface ShellAnswer {
  status: number;
  said: string[];
}

interface Helper {
  proc: ChildProcess;
  said: string[];
  waiting?: { resolve: (status: number) => void; reject: (err: Error) => void };
}

/**
 * One long-lived `sh` the agent keeps and hands command lines to, one after another.
 *
 * Starting a process from the agent's Node forks a process of a hundred-odd MiB, and each file it
 * writes goes through libuv's thread pool; a shell forks a small process and writes a file with a
 * redirection. That matters where the identity is applied: first thing in a guest restored from a
 * saved state (a clone, a suspended VM coming back), where under TCG every path runs untranslated
 * again, so the fewer and shorter the paths the sooner the guest answers. The shell started the
 * first time survives in the saved state, so a restored guest already has it. If the shell is gone
 * or will not answer, the line is run once by a fresh `sh -c` and the next call starts a new shell:
 * lines given to it must be safe to run twice.
 */
export class KeptShell {
  private helper?: Helper;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly sh: string = 'sh',
    private readonly timeoutMs = TIMEOUT_MS,
  ) {}

  /** Runs one command line (its words quoted with shellWord) and answers its status and output. */
  run(line: string): Promise<ShellAnswer> {
    const next = this.queue.then(() => this.runNow(line));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Ends the shell (the agent's shutdown, tests). */
  close(): void {
    this.helper?.proc.kill();
    this.helper = undefined;
  }

  private async runNow(line: string): Promise<ShellAnswer> {
    const ask = `${line}\necho "${STATUS}$?"\n`;
    try {
      const h = this.helper ?? this.start();
      h.said = [];
      const status = await this.ask(h, ask);
      return { status, said: h.said };
    } catch {
      this.close();
      return this.once(ask);
    }
  }

  /** The plain way: a shell of its own for this line. */
  private once(ask: string): Promise<ShellAnswer> {
    return new Promise((resolve, reject) => {
      execFile(this.sh, ['-c', ask], { timeout: this.timeoutMs, maxBuffer: 1 << 20 }, (err, stdout) => {
        const lines = String(stdout)
          .split('\n')
          .filter((l) => l !== '');
        const last = lines.at(-1);
        if (!last?.startsWith(STATUS)) {
          reject(new Error(`${this.sh} did not run the command: ${err?.message ?? 'no status'}`));
          return;
        }
        resolve({ status: Number(last.slice(STATUS.length)), said: lines.slice(0, -1).slice(0, SAID_LINES) });
      });
    });
  }

  private start(): Helper {
    const proc = spawn(this.sh, [], { stdio: ['pipe', 'pipe', 'ignore'] });
    const h: Helper = { proc, said: [] };
    let buf = '';
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => {
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const text = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!text.startsWith(STATUS)) {
          if (h.said.length < SAID_LINES) h.said.push(text);
          continue;
        }
        const w = h.waiting;
        h.waiting = undefined;
        w?.resolve(Number(text.slice(STATUS.length)));
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
    proc.on('exit', () => gone(new Error('the kept shell exited')));
    proc.stdin!.on('error', () => undefined);
    // The agent's own exit must not wait for it; the shell ends when its input closes.
    proc.unref();
    for (const s of [proc.stdin, proc.stdout]) (s as unknown as { unref?: () => void }).unref?.();
    this.helper = h;
    return h;
  }

  private ask(h: Helper, text: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        h.waiting = undefined;
        reject(new Error('the kept shell did not answer'));
      }, this.timeoutMs);
      h.waiting = {
        resolve: (n) => {
          clearTimeout(timer);
          resolve(n);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      h.proc.stdin!.write(text);
    });
  }
}
