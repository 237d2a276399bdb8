import { mkdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { inject, injectable } from 'inversify';
import type { ActivityEvent } from '../../domain/events.js';
import type { Config } from '../../app/config.js';
import { AppConfig } from '../../app/tokens.js';
import { Clock } from '../../ports/clock.js';
import type { ActivityLog } from '../../ports/stores.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

export const ACTIVITY_CAPACITY = 1000;
const FLUSH_DELAY_MS = 100;

/**
 * The activity ring in `<data_dir>/activity.json`. Recording is synchronous in memory; writes are
 * coalesced (one atomic rewrite per 100 ms at most) so a burst of creates costs one write. A
 * daemon crash can lose at most the last 100 ms of entries, never the file.
 */
@injectable()
export class FsActivityLog implements ActivityLog {
  private events: ActivityEvent[] = [];
  private nextId = 1;
  private loaded: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private readonly path: string;

  constructor(
    @inject(AppConfig) config: Config,
    @inject(Clock) private readonly clock: Clock,
  ) {
    this.path = join(config.data_dir, 'activity.json');
  }

  private load(): Promise<void> {
    this.loaded ??= (async () => {
      try {
        const parsed = JSON.parse(await readFile(this.path, 'utf8')) as { events?: ActivityEvent[] };
        const old = Array.isArray(parsed.events) ? parsed.events : [];
        this.events = [...old, ...this.events].slice(-ACTIVITY_CAPACITY);
        this.nextId = Math.max(0, ...this.events.map((e) => e.id)) + 1;
        this.events.forEach((e, i) => {
          if (i >= old.length) e.id = this.nextId++;
        });
      } catch {
        // absent or unreadable: start a new ring
      }
    })();
    return this.loaded;
  }

  record(e: Omit<ActivityEvent, 'id' | 't'>): void {
    this.events.push({ id: this.nextId++, t: new Date(this.clock.now()).toISOString(), ...e });
    if (this.events.length > ACTIVITY_CAPACITY) this.events.splice(0, this.events.length - ACTIVITY_CAPACITY);
    this.timer ??= setTimeout(() => void this.flush(), FLUSH_DELAY_MS);
  }

  async list(opts: { limit?: number; since?: number }): Promise<ActivityEvent[]> {
    await this.load();
    let out = this.events;
    if (opts.since !== undefined) out = out.filter((e) => e.id > opts.since!);
    out = [...out].reverse();
    return opts.limit !== undefined ? out.slice(0, opts.limit) : out;
  }

  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.load();
    const snapshot = JSON.stringify({ capacity: ACTIVITY_CAPACITY, events: this.events });
    this.writing = this.writing
      .then(async () => {
        await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
        await writeFileAtomic(this.path, snapshot);
      })
      .catch(() => undefined);
    await this.writing;
  }
}
