import { expect } from 'chai';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import { copyArchive, copyTarget } from '../../../../src/adapters/e2b/template-copy.js';

async function packed(entries: { name: string; data?: string; type?: 'directory' }[]): Promise<Buffer> {
  const p = tar.pack();
  for (const e of entries)
    p.entry(e.type ? { name: e.name, type: e.type, mode: 0o755 } : { name: e.name, mode: 0o644 }, e.data ?? '');
  p.finalize();
  const parts: Buffer[] = [];
  for await (const c of p as unknown as AsyncIterable<Buffer>) parts.push(c);
  return Buffer.concat(parts);
}

async function listed(out: Readable): Promise<{ name: string; uid?: number; mode?: number; data: string }[]> {
  const ex = tar.extract();
  const got: { name: string; uid?: number; mode?: number; data: string }[] = [];
  const piped = pipeline(out, ex);
  for await (const e of ex) {
    const parts: Buffer[] = [];
    for await (const c of e) parts.push(c as Buffer);
    got.push({ name: e.header.name, uid: e.header.uid, mode: e.header.mode, data: Buffer.concat(parts).toString() });
  }
  await piped;
  return got;
}

describe('adapters/e2b/template-copy', () => {
  it("puts each archived path where Docker's COPY would", () => {
    expect(copyTarget('req.txt', '/app/r.txt', 'req.txt', false)).to.equal('/app/r.txt');
    expect(copyTarget('req.txt', '/app/', 'req.txt', false)).to.equal('/app/req.txt');
    expect(copyTarget('./src/', '/app', 'src', true)).to.equal('/app');
    expect(copyTarget('src', '/app', 'src/a/b.py', false)).to.equal('/app/a/b.py');
    expect(copyTarget('src', '/app', 'srcx/b.py', false)).to.equal(undefined);
    expect(copyTarget('*.md', '/docs/', 'a.md', false)).to.equal('/docs/a.md');
    expect(copyTarget('conf/*.yml', '/etc/x/', 'conf/a.yml', false)).to.equal('/etc/x/a.yml');
    expect(copyTarget('.', '/w', 'x/y', false)).to.equal('/w/x/y');
  });

  it('turns the SDK archive (gzipped or not) into absolute guest paths, owned by the step user, with its mode', async () => {
    const raw = await packed([
      { name: 'app', type: 'directory' },
      { name: 'app/main.py', data: 'print(1)\n' },
      { name: 'other.txt', data: 'not copied' },
    ]);
    for (const [bytes, gz] of [
      [raw, false],
      [gzipSync(raw), true],
    ] as const) {
      const got = await listed(
        copyArchive(Readable.from([bytes]), gz, { src: 'app', dest: '/srv/', uid: 1000, gid: 1000, mode: 0o600 }),
      );
      expect(got.map((e) => [e.name, e.uid, e.mode, e.data])).to.deep.equal([
        ['srv/', 1000, 0o755, ''],
        ['srv/main.py', 1000, 0o600, 'print(1)\n'],
      ]);
    }
  });

  it('refuses a relative destination and a body that is not a tar', async () => {
    expect(() => copyArchive(Readable.from([]), false, { src: 'a', dest: 'rel', uid: 0, gid: 0 })).to.throw(
      /must be absolute/,
    );
    const out = copyArchive(Readable.from([Buffer.from('this is no gzip')]), true, {
      src: 'a',
      dest: '/x',
      uid: 0,
      gid: 0,
    });
    const err = await listed(out).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.match(/not a tar\.gz/);
  });
});
