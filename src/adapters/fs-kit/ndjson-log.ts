import { appendFile, readFile } from 'node:fs/promises';
import { capLog } from './log-cap.js';

/** How long appends gather before they are written together. */
const FLUSH_MS = 100;

/**
 * A log of JSON lines that one process appends to and others read: appends are gathered and
 * written together every FLUSH_MS, and the file is kept under `maxBytes` plus one older copy
 * (`<path>.1`, log-cap.ts). Not fsynced: a crash may lose the last moments of it.
 */
export class NdjsonLog {
  private lines: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private path: string,
    private readonly maxBytes: number,
  ) {}

  append(entry: object): void {
    this.lines.push(JSON.stringify(entry));
    this.timer ??= setTimeout(() => void this.flush(), FLUSH_MS).unref();
  }

  /** Writes what is gathered (and waits for earlier writes). */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const lines = this.lines;
    this.lines = [];
    const path = this.path;
    this.writing = this.writing.then(async () => {
      if (!lines.length) return;
      await appendFile(path, lines.join('\n') + '\n', { mode: 0o600 }).catch(() => undefined);
      await capLog(path, this.maxBytes).catch(() => undefined);
    });
    return this.writing;
  }

  /** Appends go to `path` from now on (the file moved with its directory). */
  async moveTo(path: string): Promise<void> {
    await this.flush();
    this.path = path;
  }
}

/**
 * The last `limit` entries of a log NdjsonLog wrote (its older copy included), oldest first, that
 * `keep` accepts. Lines that do not parse (a write cut off by a crash) are skipped.
 */
export async function readNdjsonTail<T>(
  path: string,
  limit: number,
  keep: (e: T) => boolean = () => true,
): Promise<T[]> {
  const texts = await Promise.all([`${path}.1`, path].map((p) => readFile(p, 'utf8').catch(() => '')));
  const out: T[] = [];
  for (const line of texts.join('\n').split('\n')) {
    if (!line) continue;
    try {
      const e = JSON.parse(line) as T;
      if (keep(e)) out.push(e);
    } catch {
      // a torn line
    }
  }
  return out.slice(-limit);
}
