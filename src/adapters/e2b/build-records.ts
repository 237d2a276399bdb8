import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { logTo, type Build, type BuildStatus } from './template-run.js';

const BUILD_ID = /^[0-9a-f]{16}$/;
const STATUSES: readonly BuildStatus[] = ['waiting', 'building', 'ready', 'error'];
/** A larger file is left alone, unread: no record of ours is near it (a log keeps 20,000 lines of at most 4 KiB). */
const RECORD_MAX_BYTES = 128 * 1024 * 1024;

/**
 * E2B template builds kept on disk (`<dir>/<buildID>.json`), so that a daemon restart does not
 * turn a build the SDK asks about into a 404: a build that ended is told about as it ended, one
 * requested and not started can still be started, and one a stop cut off says so (`error`).
 * Written whenever a build's status changes, each build's writes in order.
 */
export class BuildRecords {
  private readonly writes = new Map<string, Promise<void>>();

  constructor(private readonly dir: string) {}

  /**
   * The builds kept, in the order they last changed (so the newest are kept longest), a build cut
   * off by a stop turned into one that failed (and kept so).
   */
  async load(): Promise<Build[]> {
    const files = await readdir(this.dir).catch(() => [] as string[]);
    const out: { b: Build; at: number }[] = [];
    for (const f of files) {
      const id = f.endsWith('.json') ? f.slice(0, -5) : '';
      const st = BUILD_ID.test(id) ? await stat(this.file(id)).catch(() => undefined) : undefined;
      if (!st?.isFile() || st.size > RECORD_MAX_BYTES) continue;
      const b = await this.read(id);
      if (!b) {
        // not a record of ours (cut short, or not JSON): told about as no build
        await rm(this.file(id), { force: true });
        continue;
      }
      if (b.status === 'building') {
        const message = 'svcd stopped while this build ran, and the build is gone: build the template again';
        logTo(b, message, undefined, 'error');
        b.reason = { message };
        b.status = 'error';
        await this.save(b);
      }
      out.push({ b, at: st.mtimeMs });
    }
    return out.sort((x, y) => x.at - y.at).map((x) => x.b);
  }

  /** Keeps `b` as it is now (after the writes before it). A write that fails leaves the one before. */
  save(b: Build): Promise<void> {
    const text = `${JSON.stringify(b)}\n`;
    return this.inTurn(b.buildID, async () => {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await writeFileAtomic(this.file(b.buildID), text);
    });
  }

  /** The build is no longer told about: its record goes (after its writes). */
  remove(buildID: string): Promise<void> {
    return this.inTurn(buildID, () => rm(this.file(buildID), { force: true }));
  }

  /** Runs `fn` after what was asked before for the build `id`; its failure is the next one's start. */
  private inTurn(id: string, fn: () => Promise<void>): Promise<void> {
    const next = (this.writes.get(id) ?? Promise.resolve()).then(fn).catch(() => undefined);
    this.writes.set(id, next);
    void next.then(() => this.writes.get(id) === next && this.writes.delete(id));
    return next;
  }

  private async read(id: string): Promise<Build | undefined> {
    try {
      const b = JSON.parse(await readFile(this.file(id), 'utf8')) as Partial<Build>;
      const ok =
        b.buildID === id &&
        typeof b.templateID === 'string' &&
        typeof b.name === 'string' &&
        Array.isArray(b.tags) &&
        b.tags.every((t) => typeof t === 'string') &&
        STATUSES.includes(b.status as BuildStatus) &&
        Array.isArray(b.logs) &&
        (b.reason === undefined || typeof b.reason?.message === 'string');
      return ok ? (b as Build) : undefined;
    } catch {
      return undefined;
    }
  }

  private file(id: string): string {
    return join(this.dir, `${id}.json`);
  }
}
