import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import tar from 'tar-stream';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import { checkImportFile, sniffImportFile } from '../../../../src/adapters/images/import-files.js';
import { checkLayers, escapes, imageEntrypoint, imageEnvScript } from '../../../../src/adapters/images/oci-layout.js';
import { parseProcessStart } from '../../../../src/domain/processes.js';
import { makeTar } from '../../../helpers/tar.js';

describe('adapters/hypervisor/oci-layout and import checks', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-oci-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('says which names climb out of the root', () => {
    for (const ok of ['etc/passwd', './etc/x', '/abs/inside', 'a/../b', 'a/b/../../c', '.', './'])
      expect(escapes(ok), ok).to.equal(false);
    for (const bad of ['../x', 'a/../../x', '/../etc', './..', 'a/b/../../../c', 'x\0y'])
      expect(escapes(bad), bad).to.equal(true);
  });

  it('agrees with a path resolver on random names', () => {
    const part = fc.constantFrom('a', 'b', '.', '..', '');
    fc.assert(
      fc.property(fc.array(part, { maxLength: 8 }), (parts) => {
        const name = parts.join('/');
        let depth = 0;
        let out = false;
        for (const p of parts) {
          depth += p === '..' ? -1 : p === '' || p === '.' ? 0 : 1;
          if (depth < 0) out = true;
        }
        expect(escapes(name)).to.equal(out);
      }),
    );
  });

  it('checks plain and gzip layers, naming the entry that escapes', async () => {
    const good = join(dir, 'good');
    writeFileSync(
      good,
      gzipSync(
        await makeTar([
          { name: 'etc/x', data: 'x' },
          { name: 'bin/sh', type: 'symlink', linkname: '/bin/busybox' },
        ]),
      ),
    );
    const evil = join(dir, 'evil');
    writeFileSync(
      evil,
      await makeTar([
        { name: 'etc/x', data: 'x' },
        { name: 'etc/../../y', data: 'y' },
      ]),
    );
    const link = join(dir, 'link');
    writeFileSync(link, await makeTar([{ name: 'etc/h', type: 'link', linkname: '../../etc/shadow' }]));
    await checkLayers([good]);
    let err = await checkLayers([good, evil]).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.match(/layer 2 of 2: entry "etc\/..\/..\/y" would land outside/);
    err = await checkLayers([link]).catch((e: unknown) => e);
    expect((err as Error).message).to.match(/hard link "etc\/h" points outside/);
    const dev = join(dir, 'dev');
    writeFileSync(dev, await makeTar([{ name: 'dev/sda', type: 'block-device' }]));
    err = await checkLayers([dev]).catch((e: unknown) => e);
    expect((err as Error).message).to.match(/"dev\/sda" is a device node/);
    writeFileSync(join(dir, 'junk'), Buffer.alloc(2048, 9));
    err = await checkLayers([join(dir, 'junk')]).catch((e: unknown) => e);
    expect((err as Error).message).to.match(/not a readable tar/);
  });

  it('refuses layers whose files add up to more than the limit, at the header that passes it', async () => {
    // 8 MiB of zeros: a few KiB gzipped, the way a layer made to fill the disk looks
    const zeros = join(dir, 'zeros');
    writeFileSync(
      zeros,
      gzipSync(
        await makeTar([
          { name: 'a', data: 'a' },
          { name: 'fill', data: Buffer.alloc(8 << 20) },
        ]),
      ),
    );
    expect(statSync(zeros).size).to.be.below(64 << 10);
    await checkLayers([zeros], { bytes: 9 << 20, why: 'the test' });
    const err = await checkLayers([zeros, zeros], { bytes: 9 << 20, why: 'the test' }).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.equal(
      'layer 2 of 2: the layers hold more than 9.0 MiB of files (the test); it stopped at "fill"',
    );
    // A header that says 100 GiB is refused by the cap with only its first bytes present.
    const pack = tar.pack();
    const head: Buffer[] = [];
    pack.on('data', (c) => void head.push(c as Buffer));
    const big = pack.entry({ name: 'huge', size: 100 * 2 ** 30 });
    big.write(Buffer.alloc(4096));
    await new Promise((r) => setImmediate(r));
    const truncated = join(dir, 'huge');
    writeFileSync(truncated, Buffer.concat(head));
    const capped = await checkLayers([truncated]).catch((e: unknown) => e);
    expect((capped as Error).message).to.match(
      /^layer 1 of 1: the layers hold more than 64 GiB of files \(svc's cap on an imported image\); it stopped at "huge"$/,
    );
    pack.destroy();
  });

  it('writes the image config as a shell environment, quoted', () => {
    const env = imageEnvScript({
      Env: ['A=1', "Q=it's $HOME `x`", 'bad name=1', 'PATH=/app/bin:/bin'],
      WorkingDir: '/srv/my app',
    });
    writeFileSync(
      join(dir, 'image.env'),
      env.replace('/opt/svc/bin/busybox mkdir', 'mkdir').replace(/'\/srv\/my app'/g, `'${dir}/my app'`),
    );
    const out = execFileSync('sh', ['-c', `cd ${dir}; . ./image.env; echo "$A|$Q|$PATH"; pwd`], { encoding: 'utf8' });
    expect(out.split('\n').slice(0, 2)).to.deep.equal([`1|it's $HOME \`x\`|/app/bin:/bin`, `${dir}/my app`]);
  });

  it('runs Entrypoint then Cmd as docker run would, as the user part of User, in WorkingDir', () => {
    expect(
      imageEntrypoint({
        Entrypoint: ['/docker-entrypoint.sh'],
        Cmd: ['nginx', '-g', 'daemon off;'],
        User: 'www:www-data',
        WorkingDir: '/srv',
      }),
    ).to.deep.equal({
      cmd: '/docker-entrypoint.sh',
      args: ['nginx', '-g', 'daemon off;'],
      user: 'www',
      cwd: '/srv',
      tag: 'entrypoint',
    });
    expect(imageEntrypoint({ Cmd: ['python3'] })).to.deep.equal({ cmd: 'python3', args: [], tag: 'entrypoint' });
    expect(imageEntrypoint({ Entrypoint: ['/bin/app'], User: '1000:1000' })).to.include({
      cmd: '/bin/app',
      user: '1000',
    });
    // Nothing to run: no process; a relative WorkingDir is not a cwd.
    expect(imageEntrypoint({ Env: ['A=1'] })).to.equal(undefined);
    expect(imageEntrypoint({ Cmd: [''] })).to.equal(undefined);
    expect(imageEntrypoint(undefined)).to.equal(undefined);
    expect(imageEntrypoint({ Cmd: ['x'], WorkingDir: 'rel' })).to.not.have.property('cwd');
    // The agent takes it as a POST /processes body, which refuses a User it cannot name rather than
    // running the command as root.
    expect(parseProcessStart(imageEntrypoint({ Cmd: ['x'], User: 'app' }))).to.include({ user: 'app' });
    expect(() => parseProcessStart(imageEntrypoint({ Cmd: ['x'], User: 'a b' }))).to.throw(
      /user must be a user name or number, got "a b"/,
    );
  });

  it('reads only regular files inside import_dirs, links resolved', async () => {
    const inside = join(dir, 'in');
    const outside = join(dir, 'out');
    mkdirSync(inside);
    mkdirSync(outside);
    writeFileSync(join(inside, 'a.tar'), 'x');
    writeFileSync(join(outside, 'b.tar'), 'x');
    symlinkSync(join(outside, 'b.tar'), join(inside, 'b.tar'));
    expect(await checkImportFile(join(inside, 'a.tar'), [inside])).to.equal(join(inside, 'a.tar'));
    const refused = async (p: string, allowed: string[], why: RegExp) => {
      const e = await checkImportFile(p, allowed).catch((x: unknown) => x);
      expect(e, p).to.be.instanceOf(InvalidArgumentError);
      expect((e as Error).message).to.match(why);
    };
    await refused(join(inside, 'a.tar'), [], /import_dirs is empty/);
    await refused(join(inside, 'b.tar'), [inside], /b\.tar is a link that leads outside the folders/);
    await refused(join(outside, 'b.tar'), [inside], /b\.tar is outside the folders/);
    // Outside, a file that exists and one that does not get the same words; a link's target is never named.
    const words = async (p: string) => ((await checkImportFile(p, [inside]).catch((x: Error) => x)) as Error).message;
    expect(await words(join(outside, 'b.tar'))).to.equal((await words(join(outside, 'nope.tar'))).replace('nope', 'b'));
    expect(await words(join(inside, 'b.tar'))).to.not.include(outside);
    expect(await words(join(inside, '..', 'outside', 'b.tar')), 'the path as written, folded').to.match(/is outside/);
    await refused(inside, [dir], /not a regular file/);
    await refused('rel/a.tar', [inside], /absolute/);
  });

  it('sniffs what a file is before anything reads it further', async () => {
    const f = join(dir, 'f');
    writeFileSync(f, 'text\n'.repeat(300));
    for (const t of ['disk', 'oci-archive', 'docker-archive'] as const) {
      const e = await sniffImportFile(f, t).catch((x: unknown) => x);
      expect(e, t).to.be.instanceOf(InvalidArgumentError);
    }
    const mbr = Buffer.alloc(1024);
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    writeFileSync(f, mbr);
    await sniffImportFile(f, 'disk');
    writeFileSync(f, await makeTar([{ name: 'x', data: 'y' }]));
    await sniffImportFile(f, 'oci-archive');
    // still packed after disk-unpack.ts unpacked it once (packed twice): said, not read as a disk
    writeFileSync(f, Buffer.concat([Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), mbr]));
    expect(((await sniffImportFile(f, 'disk', 'disk:f.zst').catch((x: Error) => x)) as Error).message).to.equal(
      'from: disk:f.zst is still zstd-compressed once unpacked; import the disk (a .qcow2, .img or .raw), compressed once at most',
    );
  });
});
