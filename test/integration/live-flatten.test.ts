import { expect } from 'chai';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { linkSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { layersOf, MAX_LAYERS } from '../../src/adapters/hypervisor/qemu/disk-layers.js';
import { backingName } from '../../src/adapters/images/qcow2-backing.js';
import { flattenRunning, LiveFlattens } from '../../src/adapters/hypervisor/qemu/live-flatten.js';
import { type QmpClient, type QmpEvent } from '../../src/adapters/hypervisor/qemu/qmp-client.js';
import { waitForQmp } from '../../src/adapters/hypervisor/qemu/qemu-files.js';
import { SilentLogger } from '../fakes/fakes.js';
import { tempDir } from '../helpers/daemon.js';

const img = (...args: string[]) => execFileSync('qemu-img', args, { stdio: 'pipe' });
const io = (file: string, cmd: string) => execFileSync('qemu-io', ['-f', 'qcow2', '-c', cmd, file], { stdio: 'pipe' });
const layerName = () => `base-${randomBytes(8).toString('hex')}.qcow2`;

/**
 * A running VM's disk chain flattened by QEMU's block-stream (live-flatten.ts), on a real QEMU
 * (no guest: the machine is held at its start, and block jobs run all the same) whose disk stands
 * on MAX_LAYERS frozen layers over an image, as a VM forked that often does.
 */
describe('live flatten: a running QEMU put back on its image', function () {
  this.timeout(60_000);
  let root: string;
  let vm: string;
  let fork: string;
  let qemu: ChildProcess | undefined;
  let qmp: QmpClient | undefined;
  let layers: string[];

  /** The image (1 MiB of 0x11), `count` layers (layer i writes `mib` MiB of 0x20+i at i MiB), a disk on top. */
  const build = (mib: number, count = MAX_LAYERS) => {
    root = tempDir('svc-flatten-');
    vm = join(root, 'vm');
    fork = join(root, 'fork');
    mkdirSync(join(root, 'img'));
    mkdirSync(vm);
    mkdirSync(fork);
    const image = join(root, 'img', 'image.qcow2');
    img('create', '-q', '-f', 'qcow2', image, '512M');
    io(image, 'write -P 0x11 0 1M');
    layers = [];
    let below = '../img/image.qcow2';
    for (let i = 1; i <= count; i++) {
      const name = layerName();
      img('create', '-q', '-f', 'qcow2', '-b', below, '-F', 'qcow2', join(vm, name));
      io(join(vm, name), `write -P 0x${(0x20 + i).toString(16)} ${i * mib}M ${mib}M`);
      layers.unshift(name);
      below = name;
    }
    img('create', '-q', '-f', 'qcow2', '-b', below, '-F', 'qcow2', join(vm, 'disk.qcow2'));
    io(join(vm, 'disk.qcow2'), `write -P 0x99 ${2 * mib}M 64k`);
    // A fork stands on the fifth layer: its links are its own.
    for (const l of layers.slice(count - 5)) linkSync(join(vm, l), join(fork, l));
    img('convert', '-O', 'raw', join(vm, 'disk.qcow2'), join(root, 'before.raw'));
  };

  const start = async () => {
    const sock = join(root, 'qmp.sock');
    qemu = spawn(
      'qemu-system-x86_64',
      [
        ...['-machine', 'pc', '-accel', 'tcg', '-nodefaults', '-display', 'none', '-S'],
        ...['-qmp', `unix:${sock},server=on,wait=off`],
        ...['-drive', `file=${join(vm, 'disk.qcow2')},if=virtio,format=qcow2,cache=writeback,file.locking=off`],
      ],
      { stdio: 'ignore' },
    );
    // QEMU makes its socket a moment before it listens on it: waitForQmp tries until it answers.
    const client = await waitForQmp(qemu, sock);
    if (client instanceof Error) throw client;
    qmp = client;
  };

  const quit = async () => {
    if (!qemu) return;
    const gone = new Promise((r) => qemu!.once('exit', r));
    if (qemu.exitCode === null && qemu.signalCode === null) {
      // A QEMU whose monitor never answered is killed: a quit would have nobody to hear it.
      if (qmp) await qmp.execute('quit').catch(() => qemu!.kill('SIGKILL'));
      else qemu.kill('SIGKILL');
      qmp?.close();
      await gone;
    }
    qemu = qmp = undefined;
  };
  afterEach(quit);

  /** Reads the same as before, block for block. */
  const readsAsBefore = () =>
    execFileSync('qemu-img', [
      'compare',
      '-q',
      '-f',
      'raw',
      '-F',
      'qcow2',
      join(root, 'before.raw'),
      join(vm, 'disk.qcow2'),
    ]);

  it('streams the layers into the disk, points it at the image, and drops its links to them; a fork keeps its own', async () => {
    build(1);
    expect(await layersOf(vm)).to.deep.equal(layers);
    await start();
    expect(await flattenRunning(qmp!, vm, () => false)).to.equal('done');
    expect(await layersOf(vm), 'no layer left in the chain').to.deep.equal([]);
    expect(await backingName(join(vm, 'disk.qcow2'))).to.equal('../img/image.qcow2');
    expect(readdirSync(vm).sort()).to.deep.equal(['disk.qcow2']);
    expect(readdirSync(fork).sort()).to.deep.equal(layers.slice(MAX_LAYERS - 5).sort());
    // QEMU reads the disk through its new chain: one disk over the image.
    const blocks = await qmp!.execute<{ inserted?: { backing_file_depth?: number } }[]>('query-block');
    expect(blocks[0].inserted?.backing_file_depth).to.equal(1);
    await quit();
    readsAsBefore();
  });

  it('leaves a chain shorter than MAX_LAYERS as it is', async () => {
    build(1, MAX_LAYERS - 1);
    await start();
    expect(await flattenRunning(qmp!, vm, () => false)).to.equal('skipped');
    expect(await layersOf(vm)).to.deep.equal(layers);
  });

  it('is called off by settle while it copies: the chain stays whole and reads the same', async () => {
    build(32);
    await start();
    const f = new LiveFlattens(new SilentLogger());
    const running = new Promise<void>((r) =>
      qmp!.on('event', (e: QmpEvent) => {
        if (e.event === 'JOB_STATUS_CHANGE' && (e.data as { status?: string }).status === 'running') r();
      }),
    );
    f.start('vm', qmp!, vm);
    await running;
    const end = f.under('vm');
    await f.settle('vm');
    expect(await end).to.equal('cancelled');
    expect(f.under('vm')).to.equal(undefined);
    expect(await layersOf(vm)).to.deep.equal(layers);
    await quit();
    readsAsBefore();
  });
});
