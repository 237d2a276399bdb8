import { open } from 'node:fs/promises';

/** The first `bytes` bytes of a file (fewer when it is shorter), for telling what a file is. */
export async function fileHead(path: string, bytes: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(bytes);
    return buf.subarray(0, (await fh.read(buf, 0, bytes, 0)).bytesRead);
  } finally {
    await fh.close();
  }
}
