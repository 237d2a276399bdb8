import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { chainFault, freeze, shareInto } from '../../src/adapters/hypervisor/qemu/disk-layers.js';
import { fingerprintOf, ImageBases, missingBase } from '../../src/adapters/hypervisor/qemu/image-bases.js';
import { backingName } from '../../src/adapters/images/qcow2-backing.js';
import { InvalidStateError } from '../../src/domain/errors.js';
import { tempDir } from '../helpers/daemon.js';

// Real qemu-img and qemu-io on real files (scripts/ensure-host-deps.sh installs them before these run).
const img = (...args: string[]) => execFileSync('qemu-img', args, { encoding: 'utf8' });
const write = (disk: string, ch: string, at = 0) =>
  execFileSync('qemu-io', ['-f', 'qcow2', '-c', `write -P 0x${Buffer.from(ch).toString('hex')} ${at} 64k`, disk], {
    stdio: 'ignore',
  });
/** The byte at `at` as the whole chain shows it. */
const byteAt = (disk: string, at: number) =>
  execFileSync('qemu-io', ['-r', '-f', 'qcow2', '-c', `read -v ${at} 1`, disk], { encoding: 'utf8' })
    .split('\n')[0]
    .split(/\s+/)[1];

describe('a VM whose image folder moved: put on the same build at the new path, and only on it', () => {
  let root: string;
  let bases: ImageBases;
  const image = (folder: string, ch: string) => {
    const dir = join(root, folder, 'minimal');
    mkdirSync(dir, { recursive: true });
    img('create', '-q', '-f', 'qcow2', join(dir, 'disk.qcow2'), '64M');
    write(join(dir, 'disk.qcow2'), ch);
    return dir;
  };
  /** A VM's disk on the image in `dir`, which writes its own byte at 1 MiB. */
  const vmOn = (name: string, dir: string) => {
    const vm = join(root, 'vms', name);
    mkdirSync(vm, { recursive: true });
    const disk = join(vm, 'disk.qcow2');
    img('create', '-q', '-f', 'qcow2', '-b', join(dir, 'disk.qcow2'), '-F', 'qcow2', disk);
    write(disk, 'v', 1 << 20);
    return disk;
  };

  beforeEach(() => {
    root = tempDir('svc-bases-');
    bases = new ImageBases(join(root, 'image-bases.json'));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('puts a disk back on its image file at the folder’s new path, its data and the image’s as they were', async () => {
    const old = image('images', 'i');
    const disk = vmOn('v1', old);
    await bases.note(join(old, 'disk.qcow2'));
    expect(await bases.restand('v1', disk, old), 'nothing moved').to.equal(undefined);
    renameSync(join(root, 'images'), join(root, 'moved'));
    const now = join(root, 'moved', 'minimal');
    expect(await chainFault(disk)).to.match(/Could not open/);
    expect(await missingBase(disk)).to.deep.equal({ file: disk, base: join(old, 'disk.qcow2') });
    const moved = await bases.restand('v1', disk, now);
    expect(moved).to.deep.equal({ from: join(old, 'disk.qcow2'), to: join(now, 'disk.qcow2') });
    expect(await chainFault(disk)).to.equal(undefined);
    expect(await backingName(disk)).to.equal(join(now, 'disk.qcow2'));
    expect([byteAt(disk, 0), byteAt(disk, 1 << 20)]).to.deep.equal(['69', '76']);
    // The new path is recorded too: the folder can move again.
    expect(Object.keys(JSON.parse(readFileSync(join(root, 'image-bases.json'), 'utf8')))).to.have.members([
      join(old, 'disk.qcow2'),
      join(now, 'disk.qcow2'),
    ]);
  });

  it('puts a clone’s chain back through its bottom layer, shared with its template', async () => {
    const old = image('images', 'i');
    const tpl = vmOn('tpl', old);
    await bases.note(join(old, 'disk.qcow2'));
    const top = await freeze(join(root, 'vms', 'tpl'), undefined);
    const cloneDir = join(root, 'vms', 'c1');
    mkdirSync(cloneDir);
    await shareInto(join(root, 'vms', 'tpl'), cloneDir, top);
    renameSync(join(root, 'images'), join(root, 'moved'));
    const now = join(root, 'moved', 'minimal');
    const moved = await bases.restand('c1', join(cloneDir, 'disk.qcow2'), now);
    expect(moved!.from).to.equal(join(old, 'disk.qcow2'));
    expect(byteAt(join(cloneDir, 'disk.qcow2'), 1 << 20)).to.equal('76');
    // The layer is one file with the template's: it opens again too.
    expect(await chainFault(tpl)).to.equal(undefined);
  });

  it('refuses another build of the same name at the new path, and a disk no record speaks for', async () => {
    const old = image('images', 'i');
    const disk = vmOn('v1', old);
    await bases.note(join(old, 'disk.qcow2'));
    rmSync(join(root, 'images'), { recursive: true });
    const other = image('rebuilt', 'j');
    const refused = await bases.restand('v1', disk, other).catch((e: Error) => e);
    expect(refused).to.be.instanceOf(InvalidStateError);
    expect((refused as Error).message).to.equal(
      `vm v1 cannot start: its disk stands on ${join(old, 'disk.qcow2')}, which is gone, and ${join(other, 'disk.qcow2')} is another build of the image, not the one it was; put the images folder back where it was (or images_dir back to it)`,
    );
    expect(await backingName(disk), 'left as it was').to.equal(join(old, 'disk.qcow2'));

    const unknown = vmOn('v2', other);
    renameSync(join(root, 'rebuilt'), join(root, 'moved'));
    const none = await bases.restand('v2', unknown, join(root, 'moved', 'minimal')).catch((e: Error) => e);
    expect((none as Error).message).to.match(/no record says which build it was/);
    const empty = join(root, 'empty', 'minimal');
    mkdirSync(empty, { recursive: true });
    const missing = await bases.restand('v2', unknown, empty).catch((e: Error) => e);
    expect((missing as Error).message).to.match(/its image's folder \(.*empty\/minimal\) has no file of that name/);
  });

  it('leaves a disk whose own layer is gone to QEMU’s words', async () => {
    const old = image('images', 'i');
    vmOn('tpl', old);
    const top = await freeze(join(root, 'vms', 'tpl'), undefined);
    rmSync(join(root, 'vms', 'tpl', top.layer));
    await bases.note(join(old, 'disk.qcow2'));
    expect(await bases.restand('tpl', join(root, 'vms', 'tpl', 'disk.qcow2'), old)).to.equal(undefined);
  });

  it('fingerprints a file by its size and pieces over all of it: a byte changed in its middle tells it apart', async () => {
    const f = join(root, 'raw');
    const size = 8 << 20;
    writeFileSync(f, Buffer.alloc(size, 1));
    const before = await fingerprintOf(f);
    expect(before.size).to.equal(size);
    expect(await fingerprintOf(f)).to.deep.equal(before);
    // The 33rd of the 64 pieces, half way through the file.
    const fd = openSync(f, 'r+');
    writeSync(fd, Buffer.from([2]), 0, 1, Math.floor(((size - 65536) * 32) / 63) + 100);
    closeSync(fd);
    expect((await fingerprintOf(f)).fingerprint).to.not.equal(before.fingerprint);
  });
});
