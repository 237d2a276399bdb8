import { expect } from 'chai';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ImageCatalog } from '../../src/adapters/hypervisor/qemu/image-catalog.js';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { writeSaved } from '../../src/adapters/hypervisor/qemu/saved-state.js';
import type { VmSpec } from '../../src/ports/hypervisor.js';
import { SilentLogger } from '../fakes/fakes.js';
import { tempDir } from '../helpers/daemon.js';

/**
 * A stand-in for qemu-system-x86_64 (a Node script): each start appends its arguments to
 * `calls.jsonl` beside it; the starts listed in `fail.json` (by number, with the words to print)
 * print them, as QEMU would, and exit 1; the others serve QMP on the `-qmp` socket, say an
 * incoming migration completed, and quit when told.
 */
const FAKE_QEMU = `#!/usr/bin/env node
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const here = path.dirname(process.argv[1]);
const args = process.argv.slice(2);
fs.appendFileSync(path.join(here, 'calls.jsonl'), JSON.stringify(args) + '\\n');
const n = fs.readFileSync(path.join(here, 'calls.jsonl'), 'utf8').trim().split('\\n').length;
const fail = JSON.parse(fs.readFileSync(path.join(here, 'fail.json'), 'utf8'))[n];
if (fail) { process.stderr.write(fail + '\\n'); process.exit(1); }
const qmp = args[args.indexOf('-qmp') + 1].replace(/^unix:/, '').split(',')[0];
net.createServer((s) => {
  s.write(JSON.stringify({ QMP: { version: {}, capabilities: [] } }) + '\\n');
  let buf = '';
  s.on('data', (d) => {
    buf += d;
    for (let i; (i = buf.indexOf('\\n')) >= 0;) {
      const cmd = JSON.parse(buf.slice(0, i)).execute;
      buf = buf.slice(i + 1);
      const ret = cmd === 'query-migrate' ? { status: 'completed' } : cmd === 'query-status' ? { status: 'running' } : {};
      s.write(JSON.stringify({ return: ret }) + '\\n');
      if (cmd === 'quit') process.exit(0);
    }
  });
}).listen(qmp);
`;

describe('QEMU launch: what a failed start is tried again as', function () {
  this.timeout(30_000);
  let root: string;
  let hv: QemuHypervisor;

  beforeEach(() => {
    root = tempDir('svc-launch-retry-');
    const bin = join(root, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'qemu'), FAKE_QEMU);
    chmodSync(join(bin, 'qemu'), 0o755);
    const img = join(root, 'images', 'tiny');
    mkdirSync(img, { recursive: true });
    for (const f of ['vmlinux', 'disk.qcow2']) writeFileSync(join(img, f), '');
    writeFileSync(join(img, 'manifest.json'), JSON.stringify({ format: 1, kernel: 'vmlinux', disk: 'disk.qcow2', disk_gb: 1, cmdline: 'console=ttyS0', ssh_user: 'root', agent_ready: true }));
    hv = new QemuHypervisor({ qemuBinary: join(bin, 'qemu'), accel: 'tcg', images: new ImageCatalog(join(root, 'images')), log: new SilentLogger(), vsock: false, mountDriver: '9p' });
  });
  afterEach(() => hv.release());

  /** A suspended VM: a qcow2 disk (a header with no backing file is enough here), a stream and its marker. */
  async function suspendedVm(name: string): Promise<VmSpec> {
    const dir = join(root, 'vms', name);
    mkdirSync(dir, { recursive: true });
    const head = Buffer.alloc(104);
    head.writeUInt32BE(0x514649fb, 0);
    head.writeUInt32BE(3, 4);
    writeFileSync(join(dir, 'disk.qcow2'), head);
    writeFileSync(join(dir, 'state.mig'), 'saved');
    await writeSaved(dir, { kind: 'stream', file: 'state.mig' });
    return { name, dir, cpus: 1, memory_mb: 128, disk_gb: 1, image: 'tiny', hostname: name, forwards: [], mounts: [] };
  }
  const failing = (starts: Record<number, string>) => writeFileSync(join(root, 'bin', 'fail.json'), JSON.stringify(starts));
  const calls = () => readFileSync(join(root, 'bin', 'calls.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as string[]);
  const opt = (args: string[], flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);

  it('picks new ports and keeps restoring when a host port was taken before QEMU bound it', async () => {
    const spec = await suspendedVm('a');
    failing({ 1: "qemu-system-x86_64: -netdev user,id=net0,hostfwd=tcp:127.0.0.1:40000-:22: could not set up host forwarding rule 'tcp:127.0.0.1:40000-:22'" });
    const h = await hv.launch(spec, { restore: true });
    const [first, second] = calls();
    expect(calls()).to.have.length(2);
    expect(opt(first, '-incoming')).to.equal('fd:3');
    expect(opt(second, '-incoming'), 'the retry still restores').to.equal('fd:3');
    expect(opt(second, '-netdev')).to.not.equal(opt(first, '-netdev'));
    expect(opt(second, '-netdev')).to.include(`hostfwd=tcp:127.0.0.1:${h.agent_port}-:7475`);
    expect(h.restored_from_snapshot).to.equal(true);
    // Restored: the saved state no longer matches the disk and is gone.
    expect(existsSync(join(spec.dir, 'suspend.marker'))).to.equal(false);
    await hv.kill(spec);
  });

  it('cold-boots the same disk when the saved state does not load, and fails after three taken ports', async () => {
    const spec = await suspendedVm('b');
    failing({ 1: 'qemu-system-x86_64: load of migration failed: Invalid argument' });
    const h = await hv.launch(spec, { restore: true });
    const [first, second] = calls();
    expect(opt(first, '-incoming')).to.equal('fd:3');
    expect(second, 'a cold boot').to.not.include('-incoming');
    expect(h.restored_from_snapshot).to.equal(false);
    await hv.kill(spec);

    const taken = "could not set up host forwarding rule 'tcp:127.0.0.1:1-:22'";
    const again = await suspendedVm('c');
    failing({ 3: taken, 4: taken, 5: taken, 6: taken });
    let err: Error | undefined;
    await hv.launch(again, { restore: true }).catch((e: Error) => (err = e));
    // Three tries with the saved state, then one cold boot, which fails the same way.
    expect(calls().slice(2).map((a) => opt(a, '-incoming') ?? null)).to.deep.equal(['fd:3', 'fd:3', 'fd:3', null]);
    expect(err?.message).to.match(/qemu failed to start vm c: .*host forwarding/);
  });
});
