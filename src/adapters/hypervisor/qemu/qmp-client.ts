import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';

export interface QmpEvent {
  event: string;
  data?: unknown;
  timestamp?: { seconds: number; microseconds: number };
}

export class QmpError extends Error {
  constructor(
    readonly qmpClass: string,
    message: string,
  ) {
    super(message);
  }
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/**
 * A QMP client of our own: newline-delimited JSON over QEMU's monitor socket. One command in
 * flight at a time is what QMP guarantees ordering for, so commands are queued. Emits `event`
 * for asynchronous QMP events and `close` when QEMU goes away.
 */
export class QmpClient extends EventEmitter {
  private buf = '';
  private readonly queue: Pending[] = [];
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(private readonly sock: Socket) {
    super();
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => this.onData(d));
    sock.on('close', () => {
      this.closed = true;
      for (const p of this.queue.splice(0)) p.reject(new Error('QMP connection closed'));
      this.emit('close');
    });
    sock.on('error', () => undefined);
  }

  /** Connects, reads the greeting and negotiates capabilities. */
  static async connect(path: string, timeoutMs = 5000): Promise<QmpClient> {
    const sock = connect(path);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new Error(`QMP connect to ${path} timed out`));
      }, timeoutMs);
      sock.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
      sock.once('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
    const client = new QmpClient(sock);
    await client.greeting(timeoutMs);
    await client.execute('qmp_capabilities');
    return client;
  }

  private greetingWaiter?: () => void;

  private greeting(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no QMP greeting')), timeoutMs);
      this.greetingWaiter = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private onData(d: string): void {
    this.buf += d;
    for (let i = this.buf.indexOf('\n'); i >= 0; i = this.buf.indexOf('\n')) {
      const line = this.buf.slice(0, i).trim();
      this.buf = this.buf.slice(i + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if ('QMP' in msg) {
        this.greetingWaiter?.();
        this.greetingWaiter = undefined;
      } else if ('event' in msg) {
        this.emit('event', msg as unknown as QmpEvent);
      } else if ('return' in msg) {
        this.queue.shift()?.resolve(msg.return);
      } else if ('error' in msg) {
        const e = msg.error as { class?: string; desc?: string };
        this.queue.shift()?.reject(new QmpError(e.class ?? 'GenericError', e.desc ?? 'QMP error'));
      }
    }
  }

  /** Runs one QMP command; commands are sent one after another. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    const run = () =>
      new Promise<T>((resolve, reject) => {
        if (this.closed) return reject(new Error('QMP connection closed'));
        this.queue.push({ resolve: resolve as (v: unknown) => void, reject });
        this.sock.write(JSON.stringify(args ? { execute: command, arguments: args } : { execute: command }) + '\n');
      });
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => undefined);
    return p;
  }

  /**
   * Runs one QMP command with the file descriptor `fd` attached (`add-fd`), in turn with the
   * others. Node cannot attach a descriptor to a socket write, so the `helper` (native/svc-fdpass.c)
   * writes the command on this connection; the answer is read here like any other.
   */
  executeWithFd<T = unknown>(command: string, args: Record<string, unknown>, fd: number, helper: string): Promise<T> {
    const run = () =>
      new Promise<T>((resolve, reject) => {
        if (this.closed) return reject(new Error('QMP connection closed'));
        const pending: Pending = { resolve: resolve as (v: unknown) => void, reject };
        const fail = (err: Error) => {
          const i = this.queue.indexOf(pending);
          if (i < 0) return;
          this.queue.splice(i, 1);
          reject(err);
        };
        this.queue.push(pending);
        const child = spawn(helper, [JSON.stringify({ execute: command, arguments: args })], {
          stdio: ['ignore', 'ignore', 'pipe', this.sock, fd],
        });
        // Node stops reading a socket it hands to a child as stdio; this one still carries the answers.
        this.sock.resume();
        let said = '';
        child.stderr!.setEncoding('utf8').on('data', (d: string) => (said = (said + d).slice(-500)));
        child.on('error', (err) => fail(new Error(`cannot run ${helper}: ${err.message}`)));
        child.on('exit', (code) => {
          if (code !== 0) fail(new Error(said.trim() || `${helper} exited with ${code}`));
        });
      });
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => undefined);
    return p;
  }

  /**
   * Runs an HMP command through QMP. HMP reports failure inside a successful reply, so any output
   * that looks like an error is thrown.
   */
  async hmp(commandLine: string): Promise<string> {
    const out = await this.execute<string>('human-monitor-command', { 'command-line': commandLine });
    if (/error|could not|failed|not supported|does not support/i.test(out)) throw new QmpError('HmpError', out.trim());
    return out;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  close(): void {
    this.sock.destroy();
  }
}
