import type { Client, ClientChannel } from 'ssh2';
import { AgentFailureError, AgentUnavailableError, DeadlineExceededError } from '../../domain/errors.js';
import {
  REMOTE_EXEC_TIMEOUT_MS,
  REMOTE_OUTPUT_MAX,
  type RemoteExecOptions,
  type RemoteResult,
  type RemoteShell,
  type SshTarget,
} from '../../ports/tunnels.js';
import type { Ssh2Connections } from './ssh2-connections.js';

/**
 * Runs a command over SSH (ssh2 exec), streaming stdin in with backpressure. The guest is not
 * trusted: its output is kept up to a cap, the command has a deadline, and an abort ends it; in
 * each case the channel and the connection are closed, so a guest that stalls cannot hold a VM's
 * lock and one that floods cannot take the daemon's memory.
 */
export class Ssh2RemoteShell implements RemoteShell {
  constructor(private readonly ssh: Ssh2Connections) {}

  async exec(target: SshTarget, command: string, opts: RemoteExecOptions = {}): Promise<RemoteResult> {
    const timeoutMs = opts.timeoutMs ?? REMOTE_EXEC_TIMEOUT_MS;
    const max = opts.maxOutputBytes ?? REMOTE_OUTPUT_MAX;
    const where = `${target.user}@${target.host}:${target.port}`;
    const givenUp = () => new AgentUnavailableError(`ssh ${where}: the command was given up`);
    if (opts.signal?.aborted) throw givenUp();
    // An abort while it connects is heard too (a listener added after it would never be called).
    const client = await new Promise<Client>((resolve, reject) => {
      const onAbort = () => reject(givenUp());
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      this.ssh
        .get(target)
        .then(resolve, reject)
        .finally(() => opts.signal?.removeEventListener('abort', onAbort));
    });
    if (opts.signal?.aborted) throw givenUp();
    return new Promise((resolve, reject) => {
      let channel: ClientChannel | undefined;
      let settled = false;
      const finish = (err: Error | undefined, result?: RemoteResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        if (err) {
          // A guest that does not answer the channel's close must not keep anything open.
          opts.stdin?.unpipe();
          opts.stdin?.destroy();
          channel?.destroy();
          this.ssh.drop(target);
          reject(err);
        } else resolve(result!);
      };
      const timer = setTimeout(
        () => finish(new DeadlineExceededError(`ssh ${where}: the command did not end within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const onAbort = () => finish(givenUp());
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        client.exec(command, (err, ch) => {
          if (err) return finish(new AgentUnavailableError(`ssh ${where}: ${err.message}`));
          channel = ch;
          if (settled) return ch.destroy();
          const out = new Capped('stdout', max, where);
          const errOut = new Capped('stderr', max, where);
          let code: number | null = null;
          const take = (c: Capped) => (d: Buffer) => {
            const over = c.add(d);
            if (over) finish(over);
          };
          ch.on('data', take(out));
          ch.stderr.on('data', take(errOut));
          ch.on('exit', (c: number | null) => {
            code = c;
          });
          ch.on('close', () => finish(undefined, { code, stdout: out.text(), stderr: errOut.text() }));
          if (opts.stdin) {
            opts.stdin.on('error', () => ch.destroy());
            opts.stdin.pipe(ch);
          } else ch.end();
        });
      } catch (err) {
        // ssh2 throws when the connection closed after it was handed out ("Not connected")
        finish(new AgentUnavailableError(`ssh ${where}: ${(err as Error).message}`));
      }
    });
  }
}

/** One output stream, kept up to `max` bytes. */
class Capped {
  private readonly parts: Buffer[] = [];
  private size = 0;

  constructor(
    private readonly name: string,
    private readonly max: number,
    private readonly where: string,
  ) {}

  /** Keeps `d`; an error when the stream passed its cap (nothing more is kept). */
  add(d: Buffer): Error | undefined {
    this.size += d.length;
    if (this.size > this.max)
      return new AgentFailureError(`ssh ${this.where}: the command's ${this.name} passed ${this.max} bytes; ended`);
    this.parts.push(d);
    return undefined;
  }

  text(): string {
    return Buffer.concat(this.parts).toString();
  }
}
