import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { inject, injectable } from 'inversify';
import { VmStore, type ConsoleLogs } from '../../ports/stores.js';

/** `vms/<name>/serial.log`, read from an offset and followed by polling its size. */
@injectable()
export class FsConsoleLogs implements ConsoleLogs {
  constructor(@inject(VmStore) private readonly store: VmStore) {}

  async size(vm: string): Promise<number> {
    return stat(join(this.store.dir(vm), 'serial.log')).then(
      (s) => s.size,
      () => 0,
    );
  }

  async *read(
    vm: string,
    opts: { from?: number; tail?: number; follow?: boolean; signal?: AbortSignal },
  ): AsyncIterable<Buffer> {
    const path = join(this.store.dir(vm), 'serial.log');
    let pos = opts.from ?? (opts.tail !== undefined ? Math.max(0, (await this.size(vm)) - opts.tail) : 0);
    for (;;) {
      const fh = await open(path, 'r').catch(() => undefined);
      if (fh) {
        try {
          const end = (await fh.stat()).size;
          if (end < pos) pos = 0; // truncated: start over
          while (pos < end) {
            const buf = Buffer.alloc(Math.min(64 * 1024, end - pos));
            const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
            if (bytesRead === 0) break;
            pos += bytesRead;
            yield buf.subarray(0, bytesRead);
          }
        } finally {
          await fh.close();
        }
      }
      if (!opts.follow || opts.signal?.aborted) return;
      await delay(250, undefined, { signal: opts.signal }).catch(() => undefined);
      if (opts.signal?.aborted) return;
    }
  }
}
