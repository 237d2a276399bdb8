import { createWriteStream } from 'node:fs';
import { chown, mkdtemp, open, readFile, readdir, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { removeOwnDirs } from '../../fs-kit/own-dirs.js';
import { alive } from '../../process-kit/pid-alive.js';
import type { QmpClient } from './qmp-client.js';

/** The legacy internal qcow2 snapshot a suspend used to take (still restored when found). */
export const SUSPEND_TAG = 'svc-suspend';
/** Says the VM is suspended and from what it restores. */
export const MARKER = 'suspend.marker';
/** A suspend's own saved state: QEMU's migration stream in a file. */
export const OWN_STATE = 'state.mig';
/** Saved states shared with clones: hard links to one frozen file (see disk-layers.ts). */
export const SHARED_STATE = /^base-[0-9a-f]{16}\.state$/;
/** A RAM image's base name: the VM's own (`state`) or one shared with clones (`base-<id>`). */
export const OWN_IMAGE = 'state';
const IMAGE_BASE = /^(state|base-[0-9a-f]{16})$/;
/** The two files of a RAM image, own or shared. */
const IMAGE_FILE = /^(state|base-[0-9a-f]{16})\.(ram|dev)(\.tmp)?$/;

/**
 * What a suspended VM restores from: a migration stream in a file of its directory (loaded with
 * `-incoming`); a RAM image (`<base>.ram`, the guest's memory as a file QEMU maps copy-on-write,
 * and `<base>.dev`, the device state saved without that memory: ram-image.ts); or the internal
 * snapshot older daemons took (loaded with `-loadvm`).
 */
export type Saved = { kind: 'stream'; file: string } | { kind: 'image'; base: string } | { kind: 'snapshot' };

/** The files of a saved state in its VM directory (none for an internal snapshot). */
export function savedFiles(saved: Saved | undefined): string[] {
  if (saved?.kind === 'stream') return [saved.file];
  if (saved?.kind === 'image') return [`${saved.base}.ram`, `${saved.base}.dev`];
  return [];
}

/** The marker's meaning, or undefined when the VM is not suspended (or the marker is not ours). */
export async function readSaved(dir: string): Promise<Saved | undefined> {
  const text = await readFile(join(dir, MARKER), 'utf8').catch(() => '');
  const first = text.split('\n')[0].trim();
  if (first === SUSPEND_TAG) return { kind: 'snapshot' };
  const img = /^image (\S+)$/.exec(first);
  if (img) {
    if (!IMAGE_BASE.test(img[1])) return undefined;
    const saved: Saved = { kind: 'image', base: img[1] };
    for (const f of savedFiles(saved)) {
      const fh = await open(join(dir, f), 'r').catch(() => undefined);
      if (!fh) return undefined;
      await fh.close();
    }
    return saved;
  }
  const m = /^stream (\S+)$/.exec(first);
  // Only a name of ours, in this directory: the marker never points anywhere else.
  if (!m || !(m[1] === OWN_STATE || SHARED_STATE.test(m[1]))) return undefined;
  const fh = await open(join(dir, m[1]), 'r').catch(() => undefined);
  if (!fh) return undefined;
  await fh.close();
  return { kind: 'stream', file: m[1] };
}

/** Writes the marker whole or not at all (a temporary file renamed over it). */
export async function writeSaved(dir: string, saved: Saved): Promise<void> {
  const line =
    saved.kind === 'snapshot' ? SUSPEND_TAG : saved.kind === 'image' ? `image ${saved.base}` : `stream ${saved.file}`;
  const tmp = join(dir, `${MARKER}.tmp`);
  await writeFile(tmp, `${line}\n${new Date().toISOString()}\n`);
  await rename(tmp, join(dir, MARKER));
}

/** Forgets a suspend: the marker, the VM's own state and its links to shared ones. */
export async function clearSaved(dir: string): Promise<void> {
  await unlink(join(dir, MARKER)).catch(() => undefined);
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const n of names)
    if (n === OWN_STATE || SHARED_STATE.test(n) || n === `${OWN_STATE}.tmp` || IMAGE_FILE.test(n))
      await rm(join(dir, n), { force: true });
}

/** The user and group a process runs as (QEMU after -runas), from /proc; undefined when unreadable. */
export async function processOwner(pid: number): Promise<{ uid: number; gid: number } | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
  const gid = /^Gid:\s+(\d+)/m.exec(status)?.[1];
  return uid === undefined || gid === undefined ? undefined : { uid: Number(uid), gid: Number(gid) };
}

/** How saveStream writes a VM's state. */
export interface SaveStreamOptions {
  /** The user QEMU runs as, when not the daemon's: it must reach the socket. */
  owner?: { uid: number; gid: number };
  /** The file in the VM's directory (`state.mig` unless told). */
  file?: string;
  /** Without the RAM the VM's memory file holds (`x-ignore-shared`: a RAM image's `.dev`). */
  ramImage?: boolean;
  /** Stops the running guest once the socket is ready, just before the stream starts. */
  stopFirst?: boolean;
  /** Runs in QEMU's pause before the switch-over (`pause-before-switchover`). */
  preSwitchover?: () => Promise<void>;
  /** Called once the stream has begun (a test's failpoint: a daemon that dies in the save). */
  migrating?: () => void;
  /**
   * Runs once the whole stream is in its temporary file, before the file is synced and named: a
   * capture runs its guest on here, so the sync is not part of the guest's hold.
   */
  streamed?: () => Promise<void>;
}

/** A save's socket folder: `svc-mig-<the daemon's pid>-XXXXXX` in the temp dir. */
const MIGRATION_PREFIX = 'svc-mig-';

/**
 * Removes the socket folders of saves whose daemon died in them (killed, it never reached its
 * `finally`): those of this user whose pid is gone. Folders of a live daemon, this one's or another
 * user's, are left. Answers how many went.
 */
export function sweepMigrationSockets(root = tmpdir()): Promise<number> {
  return removeOwnDirs(root, (n) => {
    const pid = n.startsWith(MIGRATION_PREFIX) ? Number(/^(\d+)-./.exec(n.slice(MIGRATION_PREFIX.length))?.[1]) : NaN;
    return pid > 0 && pid !== process.pid && !alive(pid);
  });
}

/**
 * Saves the VM's state as a migration stream into `<dir>/<file>` (the guest stopped, or stopped
 * for it with `stopFirst`; running only for a capture under KVM, which stops it at the switch-over).
 * QEMU's sandbox forbids `exec:` and 7.2 has no `file:`, so it streams to a Unix socket the
 * daemon listens on in a private directory (owned by `owner`, the user QEMU runs as, when that is
 * not the daemon's) and the daemon writes the file. Exactly one connection is taken; the file counts
 * only when QEMU reports the migration completed, so a stranger connecting first gets nothing in.
 * The file appears whole and synced or not at all (a temporary file, synced, then renamed).
 */
export async function saveStream(qmp: QmpClient, dir: string, o: SaveStreamOptions = {}): Promise<void> {
  const { owner, file = OWN_STATE, ramImage = false, preSwitchover } = o;
  const sockDir = await mkdtemp(join(tmpdir(), `${MIGRATION_PREFIX}${process.pid}-`));
  const sockPath = join(sockDir, 'm.sock');
  const tmp = join(dir, `${file}.tmp`);
  const server = createServer();
  try {
    const who = owner && owner.uid !== process.getuid?.() ? owner : undefined;
    if (who) await chown(sockDir, who.uid, who.gid);
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(sockPath, resolve));
    if (who) await chown(sockPath, who.uid, who.gid);
    const received = new Promise<void>((resolve, reject) => {
      server.once('connection', (sock: Socket) => {
        server.close();
        server.on('connection', (other: Socket) => other.destroy());
        pipeline(sock, createWriteStream(tmp, { mode: 0o600 })).then(resolve, reject);
      });
    });
    // Awaited only once QEMU says the migration completed; a stream cut short must not go unheard.
    received.catch(() => undefined);
    // A stopped guest has nothing to converge, and a running one (a capture) converges the sooner
    // for it: no reason for the default 128 MiB/s cap.
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': 2 ** 40 });
    // Set either way: a VM restored from a RAM image had it on, and its own stream carries its RAM;
    // a capture's pause before the switch-over must not outlive it.
    await qmp.execute('migrate-set-capabilities', {
      capabilities: [
        { capability: 'x-ignore-shared', state: ramImage },
        { capability: 'pause-before-switchover', state: preSwitchover !== undefined },
      ],
    });
    if (o.stopFirst) await qmp.execute('stop');
    await qmp.execute('migrate', { uri: `unix:${sockPath}` });
    o.migrating?.();
    let switchedOver = false;
    for (;;) {
      const st = await qmp.execute<{ status: string; 'error-desc'?: string }>('query-migrate');
      if (st.status === 'completed') break;
      if (st.status === 'failed' || st.status === 'cancelled')
        throw new Error(`migration ${st.status}: ${st['error-desc'] ?? ''}`);
      if (st.status === 'pre-switchover' && preSwitchover && !switchedOver) {
        // The guest is stopped now, its last memory not yet sent: what must happen at this instant.
        switchedOver = true;
        try {
          await preSwitchover();
        } catch (err) {
          await qmp.execute('migrate_cancel').catch(() => undefined);
          throw err;
        }
        await qmp.execute('migrate-continue', { state: 'pre-switchover' });
        continue;
      }
      // A capture's guest is held from the switch-over on: ask often then.
      await new Promise((r) => setTimeout(r, preSwitchover ? 5 : 20));
    }
    await received;
    await o.streamed?.();
    const fh = await open(tmp, 'r+');
    await fh.sync();
    await fh.close();
    await rename(tmp, join(dir, file));
  } finally {
    server.close();
    await rm(tmp, { force: true });
    await rm(sockDir, { recursive: true, force: true });
  }
}

/**
 * Waits for an `-incoming` load to finish and lets the guest run on (unless `run` is false). Resolves with an Error
 * (the caller cold-boots) when the stream does not fit this VM or QEMU goes away meanwhile.
 */
export async function finishIncoming(qmp: QmpClient, timeoutMs = 60_000, run = true): Promise<Error | undefined> {
  const start = Date.now();
  const deadline = start + timeoutMs;
  try {
    while (Date.now() < deadline) {
      const st = await qmp.execute<{ status: string; 'error-desc'?: string }>('query-migrate');
      if (st.status === 'completed') {
        if (run) await qmp.execute('cont');
        return undefined;
      }
      if (st.status === 'failed' || st.status === 'cancelled')
        return new Error(`loading the saved state ${st.status}: ${st['error-desc'] ?? ''}`);
      // A RAM image's device state loads in tens of milliseconds, on the path of a clone: ask often
      // at first; a whole stream takes seconds.
      await new Promise((r) => setTimeout(r, Date.now() - start < 200 ? 2 : 10));
    }
    return new Error(`loading the saved state took more than ${timeoutMs} ms`);
  } catch (err) {
    return err as Error;
  }
}

/** The states a migration is over in. */
const MIGRATION_OVER = new Set(['none', 'completed', 'failed', 'cancelled']);

/**
 * Calls off a save that a dead daemon left under way in a QEMU found again (a suspend's or a
 * capture's stream went to that daemon's socket): at the pause before its switch-over QEMU would
 * wait for a word that never comes, its guest stopped. Resolves whether there was one, once QEMU
 * says it is over; throws after `timeoutMs`.
 */
export async function callOffSave(qmp: Pick<QmpClient, 'execute'>, timeoutMs = 5000): Promise<boolean> {
  const status = async () => (await qmp.execute<{ status?: string }>('query-migrate')).status ?? 'none';
  if (MIGRATION_OVER.has(await status())) return false;
  await qmp.execute('migrate_cancel');
  const deadline = Date.now() + timeoutMs;
  for (let st = await status(); !MIGRATION_OVER.has(st); st = await status()) {
    if (Date.now() > deadline) throw new Error(`the save left under way is still ${st} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}
