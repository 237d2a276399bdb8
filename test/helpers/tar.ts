import tar from 'tar-stream';
import { Readable } from 'node:stream';

export interface TarEntry {
  name: string;
  type?: 'file' | 'directory' | 'symlink' | 'link' | 'block-device' | 'character-device';
  data?: string | Buffer;
  mode?: number;
  linkname?: string;
}

/** Builds a tar archive in memory (test input, including hostile entries). */
export async function makeTar(entries: TarEntry[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  })();
  for (const e of entries) {
    const data = e.data === undefined ? undefined : Buffer.from(e.data);
    await new Promise<void>((res, rej) => {
      pack.entry(
        { name: e.name, type: e.type ?? 'file', mode: e.mode, linkname: e.linkname, size: data?.length ?? 0 },
        data ?? Buffer.alloc(0),
        (err) => (err ? rej(err) : res()),
      );
    });
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Lists a tar archive: name -> {type, mode, data, linkname}. */
export async function readTar(
  buf: Buffer,
): Promise<Map<string, { type: string; mode: number; data: Buffer; linkname?: string }>> {
  const ex = tar.extract();
  const out = new Map<string, { type: string; mode: number; data: Buffer; linkname?: string }>();
  const consume = (async () => {
    for await (const entry of ex) {
      const parts: Buffer[] = [];
      for await (const c of entry as unknown as AsyncIterable<Buffer>) parts.push(c);
      out.set(entry.header.name, {
        type: entry.header.type ?? 'file',
        mode: (entry.header.mode ?? 0) & 0o7777,
        data: Buffer.concat(parts),
        linkname: entry.header.linkname ?? undefined,
      });
    }
  })();
  Readable.from([buf]).pipe(ex as unknown as NodeJS.WritableStream);
  await consume;
  return out;
}
