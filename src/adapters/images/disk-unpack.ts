import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
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

/** What a disk unpacked into `dir` may come to: it and the qcow2 made of it must both fit. */
export const unpackRoom = (dir: string): Promise<Room> => roomIn(dir, 2, DISK_FILE_CAP, 'the disk and its qcow2');

/**
 * A disk shipped compressed with xz or gzip (a distribution's `.raw.xz`, an `.img.gz`) unpacked
 * into `dir`, bounded by `room` as it comes (a small file of zeros unpacks a thousandfold); its
 * path, or `file` itself when it is not compressed so. What else it may be is sniffImportFile's
 * to say. InvalidArgumentError, naming `label`, for one that does not unpack or passes the bound.
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
  if (kind !== 'xz' && kind !== 'gzip') return file;
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
  const xz =
    kind === 'xz'
      ? spawn('xz', ['-dc', '--', file], { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() })
      : undefined;
  let stderr = '';
  xz?.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-400)));
  // no xz on the host (scripts/ensure-host-deps.sh installs it): the host's fault, a 500 that says so
  let notRun: Error | undefined;
  xz?.once('error', (err) => (notRun = new Error(`xz could not be run: ${err.message}`)));
  const exited = xz && new Promise<number | null>((r) => xz.once('close', (code) => r(code)));
  const sink = createWriteStream(out, { mode: 0o600 });
  try {
    if (xz) await pipeline(xz.stdout!, count, sink);
    else await pipeline(createReadStream(file), createGunzip(), count, sink);
    const code = await exited;
    if (xz && code !== 0) throw new Error(stderr.trim() || `xz exited with ${code}`);
  } catch (err) {
    xz?.kill('SIGKILL');
    if (notRun) throw notRun;
    if (err instanceof InvalidArgumentError) throw err;
    throw new InvalidArgumentError(`from: ${label} is not a whole ${kind} file: ${errorMessage(err).slice(0, 300)}`);
  }
  progress({ percent: 4, message: `unpacked ${formatBytes(got)}` });
  return out;
}

/**
 * A disk's file made ready to check, in `work`: a host file (checked already) as it is, or
 * downloaded from its URL; unpacked when it came as xz or gzip. With what to call it (`disk:NAME`
 * or the URL) and the progress its later steps report through: after a download, from 55% on.
 */
export async function readyDisk(
  source: { type: 'disk'; file: string } | UrlSource,
  work: string,
  progress: (p: ImageProgress) => void,
): Promise<{ file: string; label: string; progress: (p: ImageProgress) => void }> {
  if (source.type === 'disk') {
    const label = `disk:${source.file.split('/').pop()}`;
    return { file: await unpackDisk(source.file, work, label, await unpackRoom(work), progress), label, progress };
  }
  const download = join(work, 'download');
  await downloadDisk(source, download, await downloadRoom(work), progress);
  const rest = (p: ImageProgress) => progress({ ...p, percent: 55 + Math.round(p.percent * 0.45) });
  return {
    file: await unpackDisk(download, work, source.url, await unpackRoom(work), rest),
    label: source.url,
    progress: rest,
  };
}
