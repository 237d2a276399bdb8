import { mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { KeyedMutex } from '../../app/keyed-mutex.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

/**
 * A list of records kept in one JSON file (mode 0600): read once, then served from memory; changed
 * one change at a time, each written whole and atomically. This daemon is its only writer.
 */
export class RecordFile<T> {
  private records: T[] | undefined;
  private readonly lock = new KeyedMutex();

  constructor(private readonly file: string) {}

  async list(): Promise<readonly T[]> {
    if (!this.records) {
      const text = await readFile(this.file, 'utf8').catch(() => '');
      this.records ??= text ? (JSON.parse(text) as T[]) : [];
    }
    return this.records;
  }

  /** The records as last read or saved, without a read: none before the first `list`. */
  loaded(): readonly T[] {
    return this.records ?? [];
  }

  /**
   * Runs `fn` with the records, no other change running; `save` writes the list it is given and
   * serves it from then on. What `fn` answers, or its error (nothing saved unless it saved).
   */
  change<R>(fn: (all: readonly T[], save: (next: T[]) => Promise<void>) => Promise<R>): Promise<R> {
    return this.lock.run('records', async () =>
      fn(await this.list(), async (next) => {
        await mkdir(dirname(this.file), { recursive: true, mode: 0o700 });
        await writeFileAtomic(this.file, `${JSON.stringify(next)}\n`);
        this.records = next;
      }),
    );
  }
}
