import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Request } from 'express';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  UnauthenticatedError,
} from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import { ConfinedDir } from '../fs-kit/confined-dir.js';
import { sameSecret } from '../http-kit/auth.js';
import { RecordFile } from './record-file.js';

/**
 * E2B's volumes on svc (docs/e2b.md): a volume is a folder on the host, `<dir>/<id>/`, that
 * sandboxes created with `volumeMounts` share at the path they name (an svc mount, tagged with the
 * volume's id), and that the volume content API reads and writes from the host through a
 * ConfinedDir, never following a link a guest made. The records (name, token, when it was made)
 * are in `<dir>/volumes.json`, beside the folders, out of every guest's reach.
 */
export interface VolumeRecord {
  volumeID: string;
  name: string;
  token: string;
  createdAt: string;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
const ID = /^vol-[0-9a-f]{12}$/;
/** The most volumes a daemon keeps. */
const MAX_VOLUMES = 1000;

export class Volumes {
  /** The volumes' records, `<dir>/volumes.json`: creates and deletes run one at a time. */
  private readonly records: RecordFile<VolumeRecord>;

  constructor(
    /** The folder of volumes: must be one svc's mounts may share (config `e2b_volumes_dir`). */
    readonly dir: string,
  ) {
    this.records = new RecordFile(join(dir, 'volumes.json'));
  }

  list(): Promise<readonly VolumeRecord[]> {
    return this.records.list();
  }

  /** POST /volumes: a new empty volume. */
  create(name: unknown): Promise<VolumeRecord> {
    if (typeof name !== 'string' || !NAME.test(name))
      throw new InvalidArgumentError(
        `volume name ${JSON.stringify(name)}: letters, digits, . _ - (1 to 63), starting with a letter or digit`,
      );
    return this.records.change(async (all, save) => {
      if (all.some((v) => v.name === name)) throw new AlreadyExistsError(`volume ${name} exists`);
      if (all.length >= MAX_VOLUMES) throw new InvalidStateError(`svc keeps at most ${MAX_VOLUMES} volumes`);
      const v: VolumeRecord = {
        volumeID: `vol-${randomBytes(6).toString('hex')}`,
        name,
        token: randomBytes(24).toString('hex'),
        createdAt: new Date().toISOString(),
      };
      await mkdir(this.folder(v.volumeID), { recursive: true, mode: 0o755 });
      await save([...all, v]);
      return v;
    });
  }

  /** A volume by its id or name. */
  async get(ref: string): Promise<VolumeRecord> {
    const v = (await this.list()).find((x) => x.volumeID === ref || x.name === ref);
    if (!v) throw new NotFoundError(`volume ${ref} not found`);
    return v;
  }

  /** DELETE /volumes/{id}: the volume and all it holds; refused while a VM shares it. */
  remove(ref: string, vms: Instance[]): Promise<void> {
    return this.records.change(async (all, save) => {
      const v = await this.get(ref);
      const users = vms.filter((vm) => vm.mounts.some((m) => idOf(m.tag) === v.volumeID)).map((vm) => vm.name);
      if (users.length)
        throw new InvalidStateError(`volume ${v.name} is mounted in ${users.join(', ')}; delete those sandboxes first`);
      await save(all.filter((x) => x !== v));
      await rm(this.folder(v.volumeID), { recursive: true, force: true });
    });
  }

  /** The content API's caller: the volume, when the bearer token is its own. */
  async authorized(req: Request, ref: string): Promise<ConfinedDir> {
    const v = await this.get(ref).catch(() => undefined);
    const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
    if (!v || !sameSecret(given, v.token))
      throw new UnauthenticatedError(`volume ${ref}: its token (Authorization: Bearer) is needed`);
    return new ConfinedDir(this.folder(v.volumeID));
  }

  /** The mounts a create's `volumeMounts` ([{name, path}]) make: each volume's folder at its path. */
  async mountsOf(list: unknown): Promise<{ host: string; guest: string; tag: string }[]> {
    if (list === undefined || list === null) return [];
    if (!Array.isArray(list) || list.length > 8) throw new InvalidArgumentError('volumeMounts: a list of at most 8');
    const out = [];
    for (const m of list as { name?: unknown; path?: unknown }[]) {
      const v = await this.get(String(m?.name ?? ''));
      if (typeof m.path !== 'string' || !m.path.startsWith('/'))
        throw new InvalidArgumentError(`volumeMounts: the path of volume ${v.name} must be absolute`);
      // a tag of each mount's own: a volume may be mounted at two paths
      out.push({ host: this.folder(v.volumeID), guest: m.path, tag: `${v.volumeID}-${out.length}` });
    }
    return out;
  }

  /** A sandbox's volumeMounts, from its VM's mounts (the names as read at the daemon's start, or since). */
  mountedIn(vm: Instance): { name: string; path: string }[] {
    const all = this.records.loaded();
    return vm.mounts.flatMap((m) => {
      const id = idOf(m.tag);
      return id ? [{ name: all.find((v) => v.volumeID === id)?.name ?? id, path: m.guest }] : [];
    });
  }

  private folder(id: string): string {
    if (!ID.test(id)) throw new NotFoundError(`volume ${id} not found`);
    return join(this.dir, id);
  }
}

/** The volume a mount's tag (`<volume id>-<n>`) names. */
const idOf = (tag: string | undefined) => /^(vol-[0-9a-f]{12})-\d+$/.exec(tag ?? '')?.[1];
