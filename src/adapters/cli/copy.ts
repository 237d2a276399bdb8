import { createReadStream } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { extractTree, packTree } from '../fs-kit/tar-tree.js';
import type { SvcClient } from '../client/svc-client.js';
import { progressBar } from './format.js';

export interface Endpoint {
  vm?: string;
  path: string;
}

/** `NAME:/path` is a guest path; anything else (including `./a:b`) is local. */
export function parseEndpoint(s: string): Endpoint {
  const m = /^([a-z][a-z0-9-]{0,62}):(\/.*)$/.exec(s);
  return m ? { vm: m[1], path: m[2] } : { path: s };
}

/** Counts bytes going through, drawing a progress bar on a terminal. */
function meter(total: number | undefined, tty: boolean): Transform {
  let done = 0;
  const t0 = Date.now();
  let last = 0;
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      done += chunk.length;
      if (tty && Date.now() - last > 200) {
        last = Date.now();
        process.stderr.write(`\r${progressBar(done, total, t0)}`);
      }
      cb(null, chunk);
    },
    flush(cb) {
      if (tty) process.stderr.write(`\r${progressBar(done, total, t0)}\n`);
      cb();
    },
  });
}

/**
 * svc cp SRC DST: one side is `NAME:/path`. Directories travel as tar (the agent packs and
 * extracts on its side, fs-kit's tar-tree on ours); files as bytes, written locally with writeFileAtomic.
 */
export async function copy(client: SvcClient, src: Endpoint, dst: Endpoint, tty: boolean): Promise<void> {
  if (!!src.vm === !!dst.vm) throw new Error('cp: exactly one of SRC and DST must be NAME:/path');
  if (dst.vm) {
    const st = await stat(src.path);
    if (st.isDirectory()) {
      const tar = await packTree(src.path);
      await client.upload(
        dst.vm,
        { path: dst.path, mode: 'tar' },
        tar.pipe(meter(undefined, tty)) as unknown as Readable,
      );
    } else {
      const body = createReadStream(src.path).pipe(meter(st.size, tty));
      await client.upload(
        dst.vm,
        { path: dst.path, permissions: (st.mode & 0o777).toString(8).padStart(4, '0') },
        body,
        st.size,
      );
    }
    return;
  }
  const info = await client.stat(src.vm!, src.path);
  if (info.type === 'directory') {
    const { body } = await client.download(src.vm!, src.path, 'tar');
    await mkdir(dst.path, { recursive: true });
    await extractTree(dst.path, body.pipe(meter(undefined, tty)));
    return;
  }
  const target = await stat(dst.path).then(
    (s) => (s.isDirectory() ? join(dst.path, info.name) : dst.path),
    () => dst.path,
  );
  const { body, size } = await client.download(src.vm!, src.path, 'binary');
  await writeFileAtomic(target, body.pipe(meter(size, tty)), { mode: parseInt(info.mode, 8) & 0o777 });
}
