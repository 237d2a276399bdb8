import { expect } from 'chai';
import fc from 'fast-check';
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { entryParts, extractTree, underFolder } from '../../../../src/adapters/fs-kit/tar-tree.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import { tempDir } from '../../../helpers/daemon.js';
import { makeTar, type TarEntry } from '../../../helpers/tar.js';

/** Every path under `dir`, links not followed. */
function listing(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const n of readdirSync(join(dir, rel)).sort()) {
      const p = rel ? `${rel}/${n}` : n;
      out.push(p);
      if (lstatSync(join(dir, p)).isDirectory()) walk(p);
    }
  };
  walk('');
  return out;
}

describe('adapters/fs-kit/tar-tree', () => {
  it('reads entry names as tar writes them, and refuses names that leave the root', () => {
    expect(entryParts('./', '/d')).to.deep.equal([]);
    expect(entryParts('.', '/d')).to.deep.equal([]);
    expect(entryParts('./a/./b/', '/d')).to.deep.equal(['a', 'b']);
    expect(entryParts('a//b', '/d')).to.deep.equal(['a', 'b']);
    for (const bad of ['/etc/passwd', '../x', 'a/../../x', 'a/..', 'a\0b'])
      expect(() => entryParts(bad, '/d'), bad).to.throw(InvalidArgumentError);
  });

  it('never writes outside the root, whatever entries and links the archive and the tree hold (property)', async function () {
    this.timeout(120_000);
    const sandbox = tempDir('svc-tar-prop-');
    const outside = join(sandbox, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'sentinel'), 'keep');
    const before = listing(sandbox);
    const part = fc.constantFrom('a', 'b', 'x', '.', '..', '');
    const name = fc.array(part, { minLength: 1, maxLength: 4 }).map((ps) => ps.join('/'));
    const linkTarget = fc.oneof(
      name,
      fc.constantFrom('/', outside, `${outside}/sentinel`, '../outside', '../../', '.', '..'),
    );
    const entry: fc.Arbitrary<TarEntry> = fc.oneof(
      fc.record({ name, type: fc.constant('file' as const), data: fc.constantFrom('p', 'pwned') }),
      fc.record({ name, type: fc.constant('directory' as const) }),
      fc.record({ name, type: fc.constant('symlink' as const), linkname: linkTarget }),
      fc.record({ name, type: fc.constant('link' as const), linkname: linkTarget }),
    );
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(entry, { maxLength: 8 }), fc.boolean(), async (entries, preLink) => {
        const root = join(sandbox, 'root');
        rmSync(root, { recursive: true, force: true });
        mkdirSync(root);
        if (preLink) symlinkSync(outside, join(root, 'a'));
        const archive = await makeTar(entries).catch(() => undefined);
        if (!archive) return; // names tar-stream itself cannot encode
        runs++;
        await extractTree(root, Readable.from([archive])).catch((err: Error) => {
          if (!(err instanceof InvalidArgumentError)) throw err;
        });
        expect(
          [...listing(sandbox).filter((p) => p !== 'root' && !p.startsWith('root/'))],
          JSON.stringify(entries),
        ).to.deep.equal(before);
        expect(readFileSync(join(outside, 'sentinel'), 'utf8')).to.equal('keep');
        expect(listing(outside)).to.deep.equal(['sentinel']);
      }),
      { numRuns: 400, seed: Number(process.env.SVC_FUZZ_SEED ?? Date.now() % 2 ** 31) },
    );
    expect(runs).to.be.above(300);
    rmSync(sandbox, { recursive: true, force: true });
  });

  it("puts a tar of a directory's contents under the directory's own name, links kept (underFolder)", async () => {
    const contents = await makeTar([
      { name: 'a.txt', data: 'a' },
      { name: 'sub', type: 'directory' },
      { name: 'sub/b.txt', data: 'bb' },
      { name: 'hard', type: 'link', linkname: 'a.txt' },
      { name: 'soft', type: 'symlink', linkname: 'sub/b.txt' },
    ]);
    const out = tempDir('svc-tar-under-');
    const mtime = new Date('2026-01-02T03:04:05Z');
    await extractTree(out, underFolder(Readable.from([contents]), 'app', { mode: 0o750, mtime }), 'self');
    expect(listing(out)).to.deep.equal(['app', 'app/a.txt', 'app/hard', 'app/soft', 'app/sub', 'app/sub/b.txt']);
    expect(lstatSync(join(out, 'app')).mode & 0o777).to.equal(0o750);
    expect(lstatSync(join(out, 'app')).mtime.getTime()).to.equal(mtime.getTime());
    expect(lstatSync(join(out, 'app', 'hard')).ino).to.equal(lstatSync(join(out, 'app', 'a.txt')).ino);
    expect(readlinkSync(join(out, 'app', 'soft'))).to.equal('sub/b.txt');
    expect(readFileSync(join(out, 'app', 'sub', 'b.txt'), 'utf8')).to.equal('bb');
    // an archive that is not one fails the stream, not the process
    const bad = underFolder(Readable.from([Buffer.alloc(1024, 7)]), 'app', { mode: 0o755, mtime });
    const err = await new Promise<unknown>((res) => bad.on('error', res).resume());
    expect(err).to.be.instanceOf(Error);
    rmSync(out, { recursive: true, force: true });
  });
});
