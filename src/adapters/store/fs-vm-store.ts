import { randomBytes } from 'node:crypto';
import { copyFile, lstat, mkdir, readdir, readFile, rename as renameDir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { inject, injectable } from 'inversify';
import type { VmRecord } from '../../domain/vm.js';
import { VM_NAME_RE } from '../../domain/names.js';
import type { Config } from '../../app/config.js';
import { AppConfig } from '../../app/tokens.js';
import { Logger } from '../../ports/logger.js';
import { AlreadyExistsError } from '../../domain/errors.js';
import { SNAPSHOTS_FOLDER } from '../../domain/move.js';
import type { VmFile, VmStore } from '../../ports/stores.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { exists } from '../fs-kit/exists.js';
import { capDir } from '../fs-kit/log-cap.js';
import { DiskReserve } from './disk-reserve.js';

/** A VM's directory being received (a move): never loaded, removed at the next start. */
const INCOMING = '.incoming-';
const RECORD = 'instance.json';

/** Log files a hypervisor may leave in a VM directory; kept after a failed create. */
const LOG_FILES = ['serial.log', 'qemu.log', 'agent.log', 'virtiofsd.log'];

/**
 * Records in `<data_dir>/vms/<name>/instance.json`, written with writeFileAtomic. The record of a
 * VM that exists is written with `data_dir/.reserve`'s room when the disk is full (DiskReserve).
 */
@injectable()
export class FsVmStore implements VmStore {
  private readonly root: string;
  private readonly reserve: DiskReserve;

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Logger) private readonly log: Logger,
  ) {
    this.root = join(config.data_dir, 'vms');
    this.reserve = new DiskReserve(join(config.data_dir, '.reserve'), config.state_reserve_mb * (1 << 20), log);
  }

  dir(name: string): string {
    return join(this.root, name);
  }

  async list(): Promise<VmRecord[]> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    await this.reserve.take();
    const out: VmRecord[] = [];
    for (const name of await readdir(this.root)) {
      // A move a previous daemon did not finish taking in: the VM is still its old node's.
      if (name.startsWith(INCOMING)) await rm(join(this.root, name), { recursive: true, force: true });
      if (!VM_NAME_RE.test(name)) continue;
      const rec = await this.get(name);
      if (!rec) continue;
      if (rec.name !== name) {
        // A rename cut off by a crash (a pool claim renames the member's directory, then saves the
        // record under its new name): the directory is the truth; mark it unfinished so recovery
        // rolls it back like any interrupted create.
        this.log.warn(
          { vm: name, recorded_as: rec.name },
          'a record whose directory was renamed under it; rolling it back',
        );
        out.push({ ...rec, name, status: 'creating' });
        continue;
      }
      out.push(rec);
    }
    return out;
  }

  async get(name: string): Promise<VmRecord | undefined> {
    let text: string;
    try {
      text = await readFile(join(this.dir(name), RECORD), 'utf8');
    } catch {
      return undefined;
    }
    try {
      return JSON.parse(text) as VmRecord;
    } catch (err) {
      this.log.error({ vm: name, err: (err as Error).message }, 'unreadable vm record; ignoring it');
      return undefined;
    }
  }

  async put(record: VmRecord): Promise<void> {
    const dir = this.dir(record.name);
    const file = join(dir, RECORD);
    const text = JSON.stringify(record, null, 2) + '\n';
    // A new record (a create) is refused on a full disk; what happened to a VM that exists is not.
    if (await exists(file))
      return this.reserve.write(`the record of vm ${record.name}`, () => writeFileAtomic(file, text));
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(file, text);
  }

  async rename(from: string, to: string): Promise<void> {
    await renameDir(this.dir(from), this.dir(to));
  }

  /**
   * Tried again on ENOTEMPTY: a follower that writes into the folder as it goes (a log's last line,
   * a file the guest's share got) must not turn a delete into a 500.
   */
  async remove(name: string): Promise<void> {
    await rm(this.dir(name), { recursive: true, force: true, maxRetries: 3 });
  }

  async files(name: string): Promise<VmFile[]> {
    const dir = this.dir(name);
    const out: VmFile[] = [];
    // Its own files, then its snapshots' (a folder each, or files: as the hypervisor keeps them).
    const walk = async (rel: string, depth: number): Promise<void> => {
      for (const f of (await readdir(join(dir, rel))).sort()) {
        const path = rel ? `${rel}/${f}` : f;
        // A snapshot's folder is filled under a hidden name first: one not finished is not sent.
        if (path === RECORD || (rel === SNAPSHOTS_FOLDER && f.startsWith('.'))) continue;
        const st = await lstat(join(dir, path));
        if (st.isFile()) out.push({ name: path, path: join(dir, path), size: st.size });
        else if (st.isDirectory() && (rel || f === SNAPSHOTS_FOLDER) && depth < 2) await walk(path, depth + 1);
      }
    };
    await walk('', 0);
    return out;
  }

  async receive(record: VmRecord, fill: (dir: string) => Promise<void>): Promise<void> {
    const dir = this.dir(record.name);
    if (await exists(dir)) throw new AlreadyExistsError(`vm ${record.name} already exists here`);
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    const tmp = join(this.root, `${INCOMING}${record.name}-${randomBytes(4).toString('hex')}`);
    await mkdir(tmp, { mode: 0o700 });
    try {
      await fill(tmp);
      await writeFileAtomic(join(tmp, RECORD), JSON.stringify(record, null, 2) + '\n');
      await renameDir(tmp, dir);
    } catch (err) {
      await rm(tmp, { recursive: true, force: true });
      throw err;
    }
  }

  async keepLogs(name: string): Promise<void> {
    const logs = join(this.config.data_dir, 'logs');
    await mkdir(logs, { recursive: true, mode: 0o700 });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    for (const f of LOG_FILES) {
      await copyFile(join(this.dir(name), f), join(logs, `${name}-${stamp}-${f}`)).catch(() => undefined);
    }
    await capDir(logs, this.config.logs_dir_max_mb * 1024 * 1024);
  }
}
