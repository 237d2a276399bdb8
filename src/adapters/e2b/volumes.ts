import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Request } from 'express';
import { KeyedMutex } from '../../app/keyed-mutex.js';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  UnauthenticatedError,
} from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { ConfinedDir } from '../fs-kit/confined-dir.js';
import { sameSecret } from '../http-kit/auth.js';

/**
 * E2B's volumes on svc (docs/e2b.md): a volume is a folder on the host, `<dir>/<id>/`, that
 * sandboxes created with `volumeMounts` share at the path they name (an svc mount, tagged with the
 * volume's id), and that the volume content API reads and writes from the host through a
 * ConfinedDir, never following a link a guest made. Its record, `<dir>/<id>.json` (name, token,
 * when it was made), sits beside the folder, out of every guest's reach.
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
  /** Creates and deletes run one at a time, so two creates never take one name. */
  private readonly lock = new KeyedMutex();
  /** Each volume's name by its id, as last listed (a sandbox's details name its volumes). */
  private readonly names = new Map<string, string>();

  constructor(
    /** The folder of volumes: must be one svc's mounts may share (config `e2b_volumes_dir`). */
    readonly dir: string,
  ) {}

  async list(): Promise<VolumeRecord[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const out: VolumeRecord[] = [];
    for (const n of names.filter((f) => f.endsWith('.json')).sort()) {
      const text = await readFile(join(this.dir, n), 'utf8').catch(() => '');
      if (text) out.push(JSON.parse(text) as VolumeRecord);
    }
    this.names.clear();
    for (const v of out) this.names.set(v.volumeID, v.name);
    return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /** POST /volumes: a new empty volume. */
  create(name: unknown): Promise<VolumeRecord> {
    if (typeof name !== 'string' || !NAME.test(name))
      throw new InvalidArgumentError(
        `volume name ${JSON.stringify(name)}: letters, digits, . _ - (1 to 63), starting with a letter or digit`,
      );
    return this.lock.run('volumes', async () => {
      const all = await this.list();
      if (all.some((v) => v.name === name)) throw new AlreadyExistsError(`volume ${name} exists`);
      if (all.length >= MAX_VOLUMES) throw new InvalidStateError(`svc keeps at most ${MAX_VOLUMES} volumes`);
      const v: VolumeRecord = {
        volumeID: `vol-${randomBytes(6).toString('hex')}`,
        name,
        token: randomBytes(24).toString('hex'),
        createdAt: new Date().toISOString(),
      };
      await mkdir(this.folder(v.volumeID), { recursive: true, mode: 0o755 });
      await writeFileAtomic(join(this.dir, `${v.volumeID}.json`), `${JSON.stringify(v)}\n`);
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
    return this.lock.run('volumes', async () => {
      const v = await this.get(ref);
      const users = vms.filter((vm) => vm.mounts.some((m) => idOf(m.tag) === v.volumeID)).map((vm) => vm.name);
      if (users.length)
        throw new InvalidStateError(`volume ${v.name} is mounted in ${users.join(', ')}; delete those sandboxes first`);
      await rm(join(this.dir, `${v.volumeID}.json`), { force: true });
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

  /** A sandbox's volumeMounts, from its VM's mounts (the names as last listed). */
  mountedIn(vm: Instance): { name: string; path: string }[] {
    return vm.mounts.flatMap((m) => {
      const id = idOf(m.tag);
      return id ? [{ name: this.names.get(id) ?? id, path: m.guest }] : [];
    });
  }

  private folder(id: string): string {
    if (!ID.test(id)) throw new NotFoundError(`volume ${id} not found`);
    return join(this.dir, id);
  }
}

/** The volume a mount's tag (`<volume id>-<n>`) names. */
const idOf = (tag: string | undefined) => /^(vol-[0-9a-f]{12})-\d+$/.exec(tag ?? '')?.[1];
