import { open } from 'node:fs/promises';
import { dirname, isAbsolute, join } from 'node:path';

/**
 * The backing file name a qcow2 image records (header: magic, version, then the name's offset and
 * length), or undefined when it has none. Read directly: no process per link of the chain.
 */
export async function backingName(file: string): Promise<string | undefined> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(20);
    await fh.read(head, 0, 20, 0);
    if (head.readUInt32BE(0) !== 0x514649fb) throw new Error(`${file} is not a qcow2 image`);
    const offset = Number(head.readBigUInt64BE(8));
    const size = head.readUInt32BE(16);
    if (!offset || !size) return undefined;
    if (size > 4096) throw new Error(`${file} records an oversized backing file name`);
    const name = Buffer.alloc(size);
    await fh.read(name, 0, size, offset);
    return name.toString('utf8');
  } finally {
    await fh.close();
  }
}

/** More links than any chain svc makes (a template's layers are at most `qemu.max_disk_layers`, 64). */
const CHAIN_LIMIT = 128;

/**
 * The files the qcow2 `disk` stands on, nearest first (its backing file, that one's, and on), each
 * by its full path: a relative name is beside the file that gives it. A file of the chain is read
 * only when the caller goes on past the one before it; one that cannot be read throws.
 */
export async function* backingChain(disk: string): AsyncGenerator<string> {
  let file = disk;
  for (let i = 0; i < CHAIN_LIMIT; i++) {
    const name = await backingName(file);
    if (!name) return;
    file = isAbsolute(name) ? name : join(dirname(file), name);
    yield file;
  }
}

/**
 * The file under `dir` (an image's folder) that the qcow2 `disk` stands on, through its chain of
 * backing files (a VM's disk, a template's layers, the image's disk): its path, or undefined when
 * the chain does not reach `dir` or a file of it cannot be read.
 */
export async function backingIn(disk: string, dir: string): Promise<string | undefined> {
  try {
    for await (const file of backingChain(disk)) if (dirname(file) === dir) return file;
  } catch {
    // a file of the chain cannot be read: its build cannot be told
  }
  return undefined;
}
