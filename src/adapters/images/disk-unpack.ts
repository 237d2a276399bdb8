import { execFile, spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { formatBytes } from '../../domain/bytes.js';
import { InvalidArgumentError, errorMessage } from '../../domain/errors.js';
import type { UrlSource } from '../../domain/image-request.js';
import type { ImageProgress } from '../../ports/guest-images.js';
import { fileHead } from '../fs-kit/file-head.js';
import { roomIn, type Room } from '../fs-kit/free-room.js';
import { childEnv } from '../process-kit/child-env.js';
import { COMPRESSED, DISK_FILE_CAP } from './import-files.js';
import { downloadDisk, downloadRoom } from './url-download.js';

const run = promisify(execFile);

/** What a disk unpacked into `dir` may come to: it and the qcow2 made of it must both fit. */
export const unpackRoom = (dir: string): Promise<Room> => roomIn(dir, 2, DISK_FILE_CAP, 'the disk and its qcow2');

/** The tools that unpack what a disk may be shipped in (Debian's xz-utils, zstd, bzip2); gzip the daemon unpacks itself. */
const UNPACKERS: Record<string, string[]> = {
  xz: ['xz', '-dc'],
  zstd: ['zstd', '-dcq'],
  bzip2: ['bzip2', '-dc'],
};

/**
 * A disk shipped compressed (xz, gzip, zstd or bzip2: a distribution's `.raw.xz`, an `.img.gz`)
 * unpacked into `dir`, bounded by `room` as it comes (a small file of zeros unpacks a
 * thousandfold); its path, or `file` itself when it is not compressed. What else it may be is
 * untarDisk's and sniffImportFile's to say. InvalidArgumentError, naming `label`, for one that
 * does not unpack or passes the bound.
 */
export async function unpackDisk(
  file: string,
  dir: string,
  label: string,
  room: Room,
  progress: (p: ImageProgress) => void,
): Promise<string> {
  const head = await fileHead(file, 8);
  const kind = COMPRESSED.find((c) => head.subarray(0, c.magic.length).equals(c.magic))?.name;
  if (!kind) return file;
  progress({ percent: 2, message: `unpacking the ${kind}-compressed disk` });
  const out = join(dir, 'disk.unpacked');
  let got = 0;
  const count = new Transform({
    transform(chunk: Buffer, _enc, done) {
      got += chunk.length;
      if (got > room.bytes)
        return done(
          new InvalidArgumentError(
            `from: ${label} unpacks to more than ${formatBytes(room.bytes)} (${room.why}); the unpacking was stopped`,
          ),
        );
      done(null, chunk);
    },
  });
  const tool = UNPACKERS[kind];
  const child = tool
    ? spawn(tool[0], [...tool.slice(1), '--', file], { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() })
    : undefined;
  let stderr = '';
  child?.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-400)));
  // no such tool on the host (scripts/ensure-host-deps.sh installs them): the host's fault, a 500 that says so
  let notRun: Error | undefined;
  child?.once('error', (err) => (notRun = new Error(`${tool![0]} could not be run: ${err.message}`)));
  const exited = child && new Promise<number | null>((r) => child.once('close', (code) => r(code)));
  const sink = createWriteStream(out, { mode: 0o600 });
  try {
    if (child) await pipeline(child.stdout!, count, sink);
    else await pipeline(createReadStream(file), createGunzip(), count, sink);
    const code = await exited;
    if (child && code !== 0) throw new Error(stderr.trim() || `${tool![0]} exited with ${code}`);
  } catch (err) {
    child?.kill('SIGKILL');
    if (notRun) throw notRun;
    if (err instanceof InvalidArgumentError) throw err;
    throw new InvalidArgumentError(`from: ${label} is not a whole ${kind} file: ${errorMessage(err).slice(0, 300)}`);
  }
  progress({ percent: 4, message: `unpacked ${formatBytes(got)}` });
  return out;
}

/** A member of a tar as GNU tar lists it (`tar -tvf`): its type letter, size and name. */
const LISTED = /^(.)\S*\s+\S+\s+(\d+)\s+\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? (.+)$/;
/** A member name taken as it is: plain characters, no climbing out. */
const PLAIN_NAME = /^[A-Za-z0-9._+-]+(\/[A-Za-z0-9._+-]+)*\/?$/;

/**
 * A disk shipped in a tar (GCE's and Debian's `disk.raw` in a `.tar.gz` or `.tar.xz`, already
 * unpacked by unpackDisk) taken out into `dir`; `file` itself when it is not a tar. GNU tar lists
 * it first: it must hold one regular file (directories aside) with a plain name, no larger than
 * `room`; only then is that one file extracted (sparse ones as sparse files). InvalidArgumentError,
 * naming `label`, for any other tar.
 */
export async function untarDisk(file: string, dir: string, label: string, room: Room): Promise<string> {
  const head = await fileHead(file, 262);
  if (head.subarray(257, 262).toString('latin1') !== 'ustar') return file;
  const refuse = (why: string) => new InvalidArgumentError(`from: ${label} is a tar; ${why}`);
  let listing: string;
  try {
    ({ stdout: listing } = await run('tar', ['--list', '--verbose', '--quoting-style=escape', '--file', file], {
      env: childEnv({ LC_ALL: 'C', TZ: 'UTC' }),
      maxBuffer: 64 << 10,
    }));
  } catch (err) {
    throw refuse(`GNU tar could not list it: ${errorMessage(err).slice(0, 300)}`);
  }
  const members = listing.split('\n').filter(Boolean);
  const files = members.map((l) => LISTED.exec(l)).filter((m) => m?.[1] !== 'd');
  if (files.length !== 1 || !files[0] || files[0][1] !== '-')
    throw refuse(`a tar of a disk holds one file (directories aside), this one ${members.length} entries`);
  const [, , size, name] = files[0];
  if (!PLAIN_NAME.test(name) || name.split('/').includes('..'))
    throw refuse(`its file's name ${JSON.stringify(name.slice(0, 200))} is not one svc takes`);
  if (Number(size) > room.bytes)
    throw refuse(`its disk is ${formatBytes(Number(size))}, more than ${formatBytes(room.bytes)} (${room.why})`);
  const into = join(dir, 'untarred');
  await mkdir(into, { mode: 0o700 });
  try {
    await run(
      'tar',
      ['--extract', '--no-same-owner', '--no-same-permissions', '--file', file, '--directory', into, '--', name],
      {
        env: childEnv({ LC_ALL: 'C' }),
        maxBuffer: 64 << 10,
      },
    );
  } catch (err) {
    throw refuse(`GNU tar could not take its disk out: ${errorMessage(err).slice(0, 300)}`);
  }
  const out = join(into, name);
  const st = await lstat(out);
  if (!st.isFile() || st.size !== Number(size)) throw refuse(`its disk did not come out whole`);
  return out;
}

/**
 * A disk's file made ready to check, in `work`: a host file (checked already) as it is, or
 * downloaded from its URL; unpacked when it came compressed, and taken out of its tar when it
 * came in one. With what to call it (`disk:NAME` or the URL) and the progress its later steps
 * report through: after a download, from 55% on.
 */
export async function readyDisk(
  source: { type: 'disk'; file: string } | UrlSource,
  work: string,
  progress: (p: ImageProgress) => void,
): Promise<{ file: string; label: string; progress: (p: ImageProgress) => void }> {
  if (source.type === 'disk') {
    const label = `disk:${source.file.split('/').pop()}`;
    return { file: await unpacked(source.file, work, label, progress), label, progress };
  }
  const download = join(work, 'download');
  await downloadDisk(source, download, await downloadRoom(work), progress);
  const rest = (p: ImageProgress) => progress({ ...p, percent: 55 + Math.round(p.percent * 0.45) });
  return { file: await unpacked(download, work, source.url, rest), label: source.url, progress: rest };
}

/**
 * `file` unpacked (unpackDisk), then taken out of its tar (untarDisk), in `work`; each step's
 * input goes once its output is there, when it is the import's own (never a file of the host's).
 */
async function unpacked(file: string, work: string, label: string, progress: (p: ImageProgress) => void) {
  const drop = async (done: string, next: string) => {
    if (next !== done && done.startsWith(`${work}/`)) await rm(done, { force: true });
  };
  const plain = await unpackDisk(file, work, label, await unpackRoom(work), progress);
  await drop(file, plain);
  const disk = await untarDisk(plain, work, label, await unpackRoom(work));
  await drop(plain, disk);
  return disk;
}
