import { execFile } from 'node:child_process';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { InternalError, InvalidArgumentError } from '../../domain/errors.js';
import { childEnv } from '../process-kit/child-env.js';
import type { ResolvedImage } from './image-catalog.js';

const run = promisify(execFile);

/**
 * A VM's own disk on an image's golden disk: a qcow2 overlay of `sizeGb` (the guest grows its root
 * filesystem into it), nothing copied. Every driver that boots the project's images starts here.
 */
export async function makeOverlay(img: ResolvedImage, path: string, sizeGb: number, vm: string): Promise<void> {
  if (sizeGb < img.disk_gb)
    throw new InvalidArgumentError(`disk_gb ${sizeGb} is smaller than image ${img.id} (at least ${img.disk_gb})`);
  try {
    await run(
      'qemu-img',
      ['create', '-q', '-f', 'qcow2', '-b', join(img.dir, img.disk), '-F', 'qcow2', path, `${sizeGb}G`],
      { env: childEnv() },
    );
  } catch (err) {
    throw new InternalError(
      `cannot create the disk of vm ${vm}: ${(err as { stderr?: string }).stderr ?? (err as Error).message}`,
    );
  }
}

/**
 * Grows a VM's overlay (made by makeOverlay, its VMM not running) to `sizeGb`: the guest grows its
 * root filesystem into the new room at its next boot. Never shrinks: a filesystem does not fit in
 * less than it was given.
 */
export async function growOverlay(path: string, sizeGb: number, vm: string): Promise<void> {
  const now = await virtualSize(path).catch((err: Error) => {
    throw new InternalError(`cannot read the disk of vm ${vm}: ${err.message}`);
  });
  const want = sizeGb * 2 ** 30;
  if (want < now)
    throw new InvalidArgumentError(
      `disk_gb ${sizeGb} is smaller than the disk of vm ${vm} (${Math.ceil(now / 2 ** 30)} GB): a disk only grows`,
    );
  if (want === now) return;
  try {
    await run('qemu-img', ['resize', '-q', '-f', 'qcow2', path, String(want)], { env: childEnv() });
  } catch (err) {
    throw new InternalError(
      `cannot grow the disk of vm ${vm}: ${(err as { stderr?: string }).stderr ?? (err as Error).message}`,
    );
  }
}

/** The size a qcow2 image shows its guest (its header's size field), in bytes. */
export async function virtualSize(file: string): Promise<number> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(32);
    await fh.read(head, 0, 32, 0);
    if (head.readUInt32BE(0) !== 0x514649fb) throw new Error(`${file} is not a qcow2 image`);
    return Number(head.readBigUInt64BE(24));
  } finally {
    await fh.close();
  }
}
