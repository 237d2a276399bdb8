import type { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import { InvalidArgumentError } from '../domain/errors.js';
import {
  assertProcessRef,
  assertWatchId,
  parseCursor,
  parseProcessStart,
  parseSignal,
  termSize,
  type OutputFrame,
  type ProcessInfo,
  type WatchEvent,
  type WatchInfo,
} from '../domain/processes.js';
import { GuestProcesses } from '../ports/guest-processes.js';
import { GuestProxy } from './guest-proxy.js';

/**
 * Durable processes and watches through the daemon (docs/processes.md): what a caller sends is
 * checked here (a bad body is a 400 that never reaches the guest), then handed to the guest's
 * agent, which keeps them. Nothing here ends a process when a caller leaves.
 */
@injectable()
export class ProcessProxy {
  constructor(
    @inject(GuestProxy) private readonly guest: GuestProxy,
    @inject(GuestProcesses) private readonly processes: GuestProcesses,
  ) {}

  start(vm: string, body: unknown): Promise<ProcessInfo> {
    const req = parseProcessStart(body);
    return this.processes.start(this.guest.endpoint(vm), req);
  }

  list(vm: string): Promise<ProcessInfo[]> {
    return this.processes.list(this.guest.endpoint(vm));
  }

  get(vm: string, ref: string): Promise<ProcessInfo> {
    return this.processes.get(this.guest.endpoint(vm), assertProcessRef(ref));
  }

  /** `from` as the API takes it (`N` or `stdout:N,stderr:M`) or `tail`, checked by the caller's parseOutputStart. */
  output(
    vm: string,
    ref: string,
    o: { from?: string; tail?: number; follow: boolean },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<OutputFrame>> {
    return this.processes.output(this.guest.endpoint(vm), assertProcessRef(ref), o, signal);
  }

  stdin(vm: string, ref: string, body: Readable, eof: boolean): Promise<void> {
    return this.processes.stdin(this.guest.endpoint(vm), assertProcessRef(ref), body, eof);
  }

  signal(vm: string, ref: string, signal: unknown): Promise<void> {
    return this.processes.signal(this.guest.endpoint(vm), assertProcessRef(ref), parseSignal(signal ?? 'SIGTERM'));
  }

  resize(vm: string, ref: string, body: unknown): Promise<void> {
    const b = (body ?? {}) as { cols?: unknown; rows?: unknown };
    if (b.cols === undefined || b.rows === undefined) throw new InvalidArgumentError('cols and rows are required');
    return this.processes.resize(
      this.guest.endpoint(vm),
      assertProcessRef(ref),
      termSize(b.cols, 'cols', 80),
      termSize(b.rows, 'rows', 24),
    );
  }

  remove(vm: string, ref: string): Promise<void> {
    return this.processes.remove(this.guest.endpoint(vm), assertProcessRef(ref));
  }

  watch(
    vm: string,
    o: { path?: string; recursive?: boolean; from?: string },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<WatchEvent>> {
    if (o.from) parseCursor(o.from);
    else if (!o.path)
      throw new InvalidArgumentError('path (what to watch) or from (a cursor to resume at) is required');
    else if (!o.path.startsWith('/')) throw new InvalidArgumentError('path must be absolute');
    return this.processes.watch(this.guest.endpoint(vm), o, signal);
  }

  watches(vm: string): Promise<WatchInfo[]> {
    return this.processes.watches(this.guest.endpoint(vm));
  }

  removeWatch(vm: string, id: string): Promise<void> {
    return this.processes.removeWatch(this.guest.endpoint(vm), assertWatchId(id));
  }
}
