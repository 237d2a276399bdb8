import { lstat, mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { inject, injectable } from 'inversify';
import type { Config } from '../../app/config.js';
import { AppConfig } from '../../app/tokens.js';
import type { ImageSnapshotRecord, SnapshotStore } from '../../ports/stores.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

const RECORD = 'snapshot.json';
const KEY = /^[0-9a-f]{24}$/;
/** A record is a few hundred bytes; anything larger is not one of ours. */
const RECORD_MAX = 16 * 1024;

/** `<data_dir>/snapshots/<key>/`, the hypervisor's files and `snapshot.json`, written last. */
@injectable()
export class FsSnapshotStore implements SnapshotStore {
  private readonly root: string;

  constructor(@inject(AppConfig) config: Config) {
    this.root = join(config.data_dir, 'snapshots');
  }

  dir(key: string): string {
    if (!KEY.test(key)) throw new Error(`not a snapshot key: ${key}`);
    return join(this.root, key);
  }

  private async keys(): Promise<string[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    return names.filter((n) => KEY.test(n));
  }

  async list(): Promise<ImageSnapshotRecord[]> {
    const out: ImageSnapshotRecord[] = [];
    for (const key of await this.keys()) {
      const rec = await this.read(key);
      if (rec) out.push(rec);
    }
    return out;
  }

  async unfinished(): Promise<string[]> {
    const out: string[] = [];
    for (const key of await this.keys()) if (!(await this.read(key))) out.push(key);
    return out;
  }

  private async read(key: string): Promise<ImageSnapshotRecord | undefined> {
    const path = join(this.dir(key), RECORD);
    const st = await lstat(path).catch(() => undefined);
    if (!st?.isFile() || st.size > RECORD_MAX) return undefined;
    try {
      const rec = JSON.parse(await readFile(path, 'utf8')) as ImageSnapshotRecord;
      return rec.key === key && typeof rec.image === 'string' ? rec : undefined;
    } catch {
      return undefined;
    }
  }

  async begin(key: string): Promise<string> {
    const dir = this.dir(key);
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  async commit(rec: Omit<ImageSnapshotRecord, 'size_bytes'>): Promise<ImageSnapshotRecord> {
    const dir = this.dir(rec.key);
    let size = 0;
    for (const f of await readdir(dir)) {
      const st = await lstat(join(dir, f));
      if (st.isFile()) size += st.blocks * 512; // what the sparse files hold, not their length
    }
    const full = { ...rec, size_bytes: size };
    await writeFileAtomic(join(dir, RECORD), `${JSON.stringify(full, null, 2)}\n`, { mode: 0o600 });
    return full;
  }

  async remove(key: string): Promise<void> {
    await rm(this.dir(key), { recursive: true, force: true });
  }
}
