import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { backingName } from '../../src/adapters/images/qcow2-backing.js';
import {
  chainFault,
  freeze,
  layersOf,
  MAX_LAYERS,
  replaceState,
  restandOn,
  shareInto,
} from '../../src/adapters/hypervisor/qemu/disk-layers.js';
import { clearSaved, processOwner, readSaved, writeSaved } from '../../src/adapters/hypervisor/qemu/saved-state.js';
import { growOverlay } from '../../src/adapters/images/overlay.js';
import {
  dropSnapshot,
  keepSnapshot,
  revertTo,
  replaceSnapshotState,
  shareSnapshot,
  sharedBefore,
} from '../../src/adapters/hypervisor/qemu/vm-snapshots.js';
import { InvalidArgumentError } from '../../src/domain/errors.js';
import { tempDir } from '../helpers/daemon.js';

// Real qemu-img on real files (scripts/ensure-host-deps.sh installs it before these run).
const img = (...args: string[]) => execFileSync('qemu-img', args, { encoding: 'utf8' });
/** Fills the disk's first 64 KiB with one character, as a guest would write (through qemu-io). */
const write = (disk: string, ch: string) => {
  execFileSync('qemu-io', ['-f', 'qcow2', '-c', `write -P 0x${Buffer.from(ch).toString('hex')} 0 64k`, disk], {
    stdio: 'ignore',
  });
};
/** The byte at offset 0 as the whole chain shows it. */
const firstByte = (disk: string) =>
  execFileSync('qemu-io', ['-r', '-f', 'qcow2', '-c', 'read -v 0 1', disk], { encoding: 'utf8' })
    .split('\n')[0]
    .split(/\s+/)[1];

describe('qemu disk layers: clones share a frozen template instead of copying it', () => {
  let root: string;
  let golden: string;
  const vm = (name: string) => {
    const dir = join(root, 'vms', name);
    mkdirSync(dir, { recursive: true });
    return dir;
  };

  beforeEach(() => {
    root = tempDir('svc-layers-');
    golden = join(root, 'golden.qcow2');
    img('create', '-q', '-f', 'qcow2', golden, '64M');
    write(golden, 'g');
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('freezes the template once, links the layer into each clone, and a clone writes only its overlay', async () => {
    const tpl = vm('tpl');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(tpl, 'disk.qcow2'));
    write(join(tpl, 'disk.qcow2'), 't');
    writeFileSync(join(tpl, 'state.mig'), 'ram');
    await writeSaved(tpl, { kind: 'stream', file: 'state.mig' });

    const top = await freeze(tpl, await readSaved(tpl));
    expect(top.layer).to.match(/^base-[0-9a-f]{16}\.qcow2$/);
    expect(top.state).to.deep.equal({ kind: 'stream', file: top.layer.replace('.qcow2', '.state') });
    const stateFile = top.layer.replace('.qcow2', '.state');
    // The template now stands on the layer, restores from the shared state, and its own state is gone.
    expect(await backingName(join(tpl, 'disk.qcow2'))).to.equal(top.layer);
    expect(await readSaved(tpl)).to.deep.equal(top.state);
    expect(readdirSync(tpl)).to.not.include('state.mig');
    expect(statSync(join(tpl, top.layer)).mode & 0o222).to.equal(0);
    // Untouched since: the next clone reuses the layer.
    expect(await freeze(tpl, await readSaved(tpl))).to.deep.equal(top);

    const clones = ['c1', 'c2'].map(vm);
    for (const c of clones) expect(await shareInto(tpl, c, top)).to.deep.equal({ snapshot: true });
    for (const c of clones) {
      expect(statSync(join(c, top.layer)).ino).to.equal(statSync(join(tpl, top.layer)).ino);
      expect(statSync(join(c, stateFile)).ino).to.equal(statSync(join(tpl, stateFile)).ino);
      expect(await readSaved(c)).to.deep.equal(top.state);
      expect(firstByte(join(c, 'disk.qcow2'))).to.equal('74'); // 't', through the chain
    }
    write(join(clones[0], 'disk.qcow2'), 'x');
    expect(firstByte(join(clones[0], 'disk.qcow2'))).to.equal('78');
    expect(firstByte(join(clones[1], 'disk.qcow2'))).to.equal('74');
    expect(firstByte(join(tpl, 'disk.qcow2'))).to.equal('74');
    expect(statSync(join(tpl, top.layer)).nlink).to.equal(3);
  });

  it('freezes again after the template changed, and a clone of a clone links the whole chain', async () => {
    const tpl = vm('tpl');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(tpl, 'disk.qcow2'));
    const first = await freeze(tpl, undefined);
    expect(first.state).to.equal(undefined);
    write(join(tpl, 'disk.qcow2'), 'u'); // the template ran
    const second = await freeze(tpl, undefined);
    expect(second.layer).to.not.equal(first.layer);
    expect(await layersOf(tpl)).to.deep.equal([second.layer, first.layer]);

    const c = vm('c');
    expect(await shareInto(tpl, c, second)).to.deep.equal({ snapshot: false });
    expect(await readSaved(c)).to.equal(undefined);
    write(join(c, 'disk.qcow2'), 'c');
    const cTop = await freeze(c, undefined);
    const cc = vm('cc');
    await shareInto(c, cc, cTop);
    expect((await layersOf(cc)).sort()).to.deep.equal([cTop.layer, second.layer, first.layer].sort());
    // The template and the first clone go; the clone of the clone still reads its whole chain.
    rmSync(tpl, { recursive: true });
    renameSync(c, join(root, 'vms', 'renamed')); // a rename (pool claim) keeps relative backing names
    rmSync(join(root, 'vms', 'renamed'), { recursive: true });
    expect(firstByte(join(cc, 'disk.qcow2'))).to.equal('63');
    expect(img('check', '-q', join(cc, 'disk.qcow2'))).to.equal('');
  });

  it(`flattens a template's chain into one layer on the image past ${MAX_LAYERS} layers; older clones keep theirs`, async () => {
    const tpl = vm('tpl');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(tpl, 'disk.qcow2'));
    /** Cycle i writes its own letter at its own 64 KiB block: every layer holds something. */
    const letter = (i: number) => String.fromCharCode(0x61 + i);
    const writeAt = (disk: string, i: number) =>
      execFileSync(
        'qemu-io',
        ['-f', 'qcow2', '-c', `write -P 0x${Buffer.from(letter(i)).toString('hex')} ${(i + 1) * 65536} 64k`, disk],
        { stdio: 'ignore' },
      );
    const byteAt = (disk: string, off: number) =>
      execFileSync('qemu-io', ['-r', '-f', 'qcow2', '-c', `read -v ${off} 1`, disk], { encoding: 'utf8' })
        .split('\n')[0]
        .split(/\s+/)[1];
    const shows = (disk: string, n: number) => {
      expect(byteAt(disk, 0)).to.equal('67'); // the image's 'g'
      for (let i = 0; i < n; i++)
        expect(byteAt(disk, (i + 1) * 65536), `block ${i + 1}`).to.equal(Buffer.from(letter(i)).toString('hex'));
    };
    writeFileSync(join(tpl, 'state.mig'), 'ram');
    await writeSaved(tpl, { kind: 'stream', file: 'state.mig' });
    let top = await freeze(tpl, await readSaved(tpl));
    for (let i = 1; i < MAX_LAYERS; i++) {
      writeAt(join(tpl, 'disk.qcow2'), i - 1);
      top = await freeze(tpl, await readSaved(tpl));
    }
    const long = await layersOf(tpl);
    expect(long).to.have.length(MAX_LAYERS);
    const before = vm('before');
    await shareInto(tpl, before, top);

    writeAt(join(tpl, 'disk.qcow2'), MAX_LAYERS - 1);
    const flat = await freeze(tpl, await readSaved(tpl));
    expect(await layersOf(tpl)).to.deep.equal([flat.layer]);
    expect(await backingName(join(tpl, flat.layer))).to.equal(golden);
    for (const old of long) expect(readdirSync(tpl)).to.not.include(old);
    expect(readdirSync(tpl).filter((n) => n.endsWith('.tmp'))).to.deep.equal([]);
    // The same bytes, and the saved state goes with them.
    shows(join(tpl, 'disk.qcow2'), MAX_LAYERS);
    expect(await readSaved(tpl)).to.deep.equal(flat.state);
    expect(flat.state?.kind === 'stream' && readFileSync(join(tpl, flat.state.file), 'utf8')).to.equal('ram');
    const after = vm('after');
    await shareInto(tpl, after, flat);
    expect(await layersOf(after)).to.deep.equal([flat.layer]);
    shows(join(after, 'disk.qcow2'), MAX_LAYERS);
    // The clone made before keeps its whole chain, still readable with the template's links gone.
    expect(await layersOf(before)).to.deep.equal(long);
    shows(join(before, 'disk.qcow2'), MAX_LAYERS - 1);
  });

  it('re-stands a moved chain on the image where it lands: the bottom layer names the new path, data untouched; a chain that does not open says why', async () => {
    const tpl = vm('tpl');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(tpl, 'disk.qcow2'));
    write(join(tpl, 'disk.qcow2'), 't');
    await freeze(tpl, undefined);
    const clone = vm('clone');
    await shareInto(tpl, clone, await freeze(tpl, undefined));
    // The clone's directory as another node receives it: copies of its files; its image elsewhere.
    const there = vm('there');
    for (const f of readdirSync(clone)) writeFileSync(join(there, f), readFileSync(join(clone, f)));
    const [layer] = await layersOf(there);
    expect(await backingName(join(there, layer))).to.equal(golden);
    const image2 = join(root, 'images2');
    mkdirSync(image2);
    expect(await chainFault(join(there, 'disk.qcow2'))).to.equal(undefined);
    renameSync(golden, join(image2, 'disk.qcow2'));
    // Its image moved: the chain does not open, and the fault names the file that is gone.
    expect(await chainFault(join(there, 'disk.qcow2'))).to.match(
      new RegExp(`^Could not open '${golden}': No such file`),
    );
    await restandOn(there, join(image2, 'disk.qcow2'));
    expect(await chainFault(join(there, 'disk.qcow2'))).to.equal(undefined);
    expect(await backingName(join(there, layer))).to.equal(join(image2, 'disk.qcow2'));
    expect(await layersOf(there)).to.deep.equal([layer]);
    expect(firstByte(join(there, 'disk.qcow2'))).to.equal('74'); // 't', the template's write, through the chain
    // A disk with no layers of its own is the bottom itself.
    const plain = vm('plain');
    img(
      'create',
      '-q',
      '-f',
      'qcow2',
      '-b',
      join(root, 'gone.qcow2'),
      '-F',
      'qcow2',
      '-u',
      join(plain, 'disk.qcow2'),
      '64M',
    );
    await restandOn(plain, join(image2, 'disk.qcow2'));
    expect(await backingName(join(plain, 'disk.qcow2'))).to.equal(join(image2, 'disk.qcow2'));
    expect(firstByte(join(plain, 'disk.qcow2'))).to.equal('67'); // 'g', the image's
  });

  it('reads the backing name from the qcow2 header and refuses what is not qcow2', async () => {
    const dir = vm('x');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(dir, 'disk.qcow2'));
    expect(await backingName(join(dir, 'disk.qcow2'))).to.equal(golden);
    expect(await backingName(golden)).to.equal(undefined);
    writeFileSync(join(dir, 'raw'), Buffer.alloc(512));
    let err: Error | undefined;
    await backingName(join(dir, 'raw')).catch((e: Error) => (err = e));
    expect(err?.message).to.match(/not a qcow2 image/);
  });

  it('freezes a RAM image like a stream: both files shared by link, the own ones gone; a stream put in its place by replaceState', async () => {
    const tpl = vm('img');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(tpl, 'disk.qcow2'));
    writeFileSync(join(tpl, 'state.ram'), 'memory');
    writeFileSync(join(tpl, 'state.dev'), 'devices');
    await writeSaved(tpl, { kind: 'image', base: 'state' });
    const top = await freeze(tpl, await readSaved(tpl));
    const base = top.layer.replace('.qcow2', '');
    expect(top.state).to.deep.equal({ kind: 'image', base });
    expect(await readSaved(tpl)).to.deep.equal(top.state);
    expect(readdirSync(tpl).filter((n) => n.startsWith('state.'))).to.deep.equal([]);
    expect(await freeze(tpl, await readSaved(tpl))).to.deep.equal(top);
    const c = vm('img-c');
    await shareInto(tpl, c, top);
    for (const f of [`${base}.ram`, `${base}.dev`]) {
      expect(statSync(join(c, f)).ino).to.equal(statSync(join(tpl, f)).ino);
      expect(statSync(join(tpl, f)).mode & 0o222).to.equal(0);
    }
    expect(await readSaved(c)).to.deep.equal(top.state);

    // A template frozen with a stream whose RAM image was made afterwards (qemu-hypervisor's asImage).
    const t2 = vm('img2');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', join(t2, 'disk.qcow2'));
    writeFileSync(join(t2, 'state.mig'), 'stream');
    await writeSaved(t2, { kind: 'stream', file: 'state.mig' });
    const streamTop = await freeze(t2, await readSaved(t2));
    const b2 = streamTop.layer.replace('.qcow2', '');
    writeFileSync(join(t2, `${b2}.ram`), 'memory');
    writeFileSync(join(t2, `${b2}.dev`), 'devices');
    const imageTop = await replaceState(t2, streamTop, { kind: 'image', base: b2 });
    expect(await readSaved(t2)).to.deep.equal({ kind: 'image', base: b2 });
    expect(readdirSync(t2)).to.not.include(`${b2}.state`);
    // The note follows: the next clone reuses the image, nothing is frozen again.
    expect(await freeze(t2, await readSaved(t2))).to.deep.equal(imageTop);
  });

  it('trusts only markers that name a state file of its own in the VM directory', async () => {
    const dir = vm('m');
    writeFileSync(join(dir, 'state.mig'), 'ram');
    for (const [text, want] of [
      ['svc-suspend\n2026-01-01\n', { kind: 'snapshot' }],
      ['stream state.mig\n', { kind: 'stream', file: 'state.mig' }],
      ['stream ../../etc/passwd\n', undefined],
      ['stream /etc/passwd\n', undefined],
      ['stream base-0123456789abcdef.state\n', undefined], // not there
      ['image state\n', { kind: 'image', base: 'state' }],
      ['image base-0123456789abcdef\n', undefined], // only its .ram is there
      ['image ../state\n', undefined],
      ['image state.ram\n', undefined],
      ['garbage', undefined],
    ] as const) {
      writeFileSync(join(dir, 'state.ram'), 'ram');
      writeFileSync(join(dir, 'state.dev'), 'dev');
      writeFileSync(join(dir, 'base-0123456789abcdef.ram'), 'ram');
      writeFileSync(join(dir, 'suspend.marker'), text);
      expect(await readSaved(dir), text).to.deep.equal(want);
    }
    await writeSaved(dir, { kind: 'stream', file: 'state.mig' });
    expect(readFileSync(join(dir, 'suspend.marker'), 'utf8')).to.match(/^stream state\.mig\n/);
    writeFileSync(join(dir, 'base-0123456789abcdef.state'), 'shared');
    // A RAM image's files go too, and what a crash left of one being made.
    for (const f of ['base-0123456789abcdef.dev', 'state.ram.tmp', 'state.dev.tmp']) writeFileSync(join(dir, f), 'x');
    await clearSaved(dir);
    expect(readdirSync(dir)).to.deep.equal([]);
  });

  it('reads the user a process runs as (the suspend socket is made theirs)', async () => {
    expect(await processOwner(process.pid)).to.deep.equal({ uid: process.getuid!(), gid: process.getgid!() });
    expect(await processOwner(2 ** 22 + 12345)).to.equal(undefined);
  });
});

describe('a VM overlay grown while its VMM is stopped (an edit of its disk_gb)', () => {
  it('grows the virtual size and keeps the data and the backing file; refuses to shrink', async () => {
    const root = tempDir('svc-grow-');
    const golden = join(root, 'golden.qcow2');
    img('create', '-q', '-f', 'qcow2', golden, '1G');
    const disk = join(root, 'disk.qcow2');
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', disk, '2G');
    write(disk, 'g');
    const size = () => (JSON.parse(img('info', '--output=json', disk)) as { 'virtual-size': number })['virtual-size'];
    await growOverlay(disk, 5, 'vm1');
    expect(size()).to.equal(5 * 2 ** 30);
    expect(firstByte(disk)).to.equal('67'); // 'g'
    expect(await backingName(disk)).to.equal(golden);
    await growOverlay(disk, 5, 'vm1'); // the size it has: nothing to do
    let err: unknown;
    await growOverlay(disk, 3, 'vm1').catch((e: unknown) => (err = e));
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect(String(err)).to.match(/disk_gb 3 is smaller than the disk of vm vm1 \(5 GB\): a disk only grows/);
    expect(size()).to.equal(5 * 2 ** 30);
  });
});

describe("a VM's named snapshots on its layers (vm-snapshots.ts)", () => {
  let root: string;
  let dir: string;
  const disk = () => join(dir, 'disk.qcow2');
  const layerFiles = () => readdirSync(dir).filter((f) => /^base-[0-9a-f]{16}\.qcow2$/.test(f));
  beforeEach(() => {
    root = tempDir('svc-snaps-');
    const golden = join(root, 'golden.qcow2');
    img('create', '-q', '-f', 'qcow2', golden, '64M');
    write(golden, 'g');
    dir = join(root, 'vms', 'v');
    mkdirSync(dir, { recursive: true });
    img('create', '-q', '-f', 'qcow2', '-b', golden, '-F', 'qcow2', disk());
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('keeps the disk (and a saved state) under a name and puts the VM back to either, in place', async () => {
    write(disk(), 'a');
    await keepSnapshot(dir, 's1', await freeze(dir, undefined));
    write(disk(), 'b');
    writeFileSync(join(dir, 'state.mig'), 'ram of b');
    await writeSaved(dir, { kind: 'stream', file: 'state.mig' });
    await keepSnapshot(dir, 's2', await freeze(dir, await readSaved(dir)));
    // A clone made meanwhile stands on its own links.
    const clone = join(root, 'vms', 'c');
    mkdirSync(clone);
    await shareInto(dir, clone, await freeze(dir, await readSaved(dir)));
    await clearSaved(dir);
    write(disk(), 'c');
    expect(firstByte(disk())).to.equal('63'); // 'c'

    expect(await revertTo(dir, 's1')).to.deep.equal({ memory: false });
    expect(firstByte(disk())).to.equal('61'); // 'a'
    expect(await readSaved(dir)).to.equal(undefined);
    // Only the layers its disk stands on are left in its directory.
    expect(layerFiles().sort()).to.deep.equal((await layersOf(dir)).sort());
    write(disk(), 'x'); // it runs on from there

    expect(await revertTo(dir, 's2')).to.deep.equal({ memory: true });
    expect(firstByte(disk())).to.equal('62'); // 'b'
    const saved = await readSaved(dir);
    expect(saved?.kind).to.equal('stream');
    expect(readFileSync(join(dir, (saved as { file: string }).file), 'utf8')).to.equal('ram of b');
    expect(firstByte(join(clone, 'disk.qcow2'))).to.equal('62');
    expect(img('check', '-q', disk())).to.equal('');
    // A new VM made from a snapshot stands on its own links to the snapshot's layers and state.
    const kid = join(root, 'vms', 'kid');
    mkdirSync(kid);
    const sharedS2 = await shareSnapshot(dir, 's2', kid);
    expect(sharedS2).to.deep.include({ snapshot: true });
    expect(sharedS2.state?.kind).to.equal('stream');
    expect(firstByte(join(kid, 'disk.qcow2'))).to.equal('62');
    const stream = (await readSaved(kid)) as { file: string };
    expect(readFileSync(join(kid, stream.file), 'utf8')).to.equal('ram of b');
    // The second new VM from it makes a RAM image of its stream (the first only notes it was used).
    expect(await sharedBefore(dir, 's2')).to.equal(false);
    expect(await sharedBefore(dir, 's2')).to.equal(true);
    // The RAM image made of the stream goes into the snapshot in its place.
    const base = stream.file.replace(/\.state$/, '');
    writeFileSync(join(kid, `${base}.ram`), 'ram image of b');
    writeFileSync(join(kid, `${base}.dev`), 'devices of b');
    await replaceSnapshotState(dir, 's2', kid, { kind: 'image', base });
    const s2 = join(dir, 'snapshots', 's2');
    expect(readdirSync(s2))
      .to.include.members([`${base}.ram`, `${base}.dev`])
      .and.not.include(stream.file);
    expect(JSON.parse(readFileSync(join(s2, 'snapshot.json'), 'utf8')).state).to.deep.equal({ kind: 'image', base });
    expect(statSync(join(s2, `${base}.ram`)).mode & 0o777, 'read-only').to.equal(0o444);
    expect(statSync(join(s2, `${base}.ram`)).ino, 'one file with the new VM').to.equal(
      statSync(join(kid, `${base}.ram`)).ino,
    );
    const kid2 = join(root, 'vms', 'kid2');
    mkdirSync(kid2);
    expect(await shareSnapshot(dir, 's1', kid2)).to.deep.include({ snapshot: false, state: undefined });
    expect(firstByte(join(kid2, 'disk.qcow2'))).to.equal('61');

    // A revert leaves each snapshot as it was: back to s1 again, then s1 goes; s2 still works.
    await revertTo(dir, 's1');
    expect(firstByte(disk())).to.equal('61');
    await dropSnapshot(dir, 's1');
    expect(readdirSync(join(dir, 'snapshots'))).to.deep.equal(['s2']);
    let err: unknown;
    await revertTo(dir, 's1').catch((e: unknown) => (err = e));
    expect(String(err)).to.match(/ENOENT/);
    await revertTo(dir, 's2');
    expect(firstByte(disk())).to.equal('62');
    // The VM's directory renamed (a pool claim) keeps its snapshots' relative names.
    const moved = join(root, 'vms', 'w');
    renameSync(dir, moved);
    dir = moved;
    write(disk(), 'z');
    await revertTo(dir, 's2');
    expect(firstByte(disk())).to.equal('62');
    // It resumes from the RAM image now.
    expect(await readSaved(dir)).to.deep.equal({ kind: 'image', base });
    expect(readFileSync(join(dir, `${base}.ram`), 'utf8')).to.equal('ram image of b');
    await dropSnapshot(dir, 's2');
    expect(readdirSync(dir)).to.not.include('snapshots');
  });

  it('replaces what a snapshot that did not finish left, and reads only names of its own from snapshot.json', async () => {
    write(disk(), 'a');
    mkdirSync(join(dir, 'snapshots', '.s1.tmp'), { recursive: true });
    writeFileSync(join(dir, 'snapshots', '.s1.tmp', 'junk'), 'x');
    await keepSnapshot(dir, 's1', await freeze(dir, undefined));
    expect(readdirSync(join(dir, 'snapshots'))).to.deep.equal(['s1']);
    writeFileSync(join(dir, 'snapshots', 's1', 'snapshot.json'), JSON.stringify({ layer: '../../golden.qcow2' }));
    let err: unknown;
    await revertTo(dir, 's1').catch((e: unknown) => (err = e));
    expect(String(err)).to.match(/no layer in snapshot\.json/);
    expect(firstByte(disk())).to.equal('61'); // untouched
  });
});
