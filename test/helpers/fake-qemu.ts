import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { VmSpec } from '../../src/ports/hypervisor.js';
import { ImageCatalog } from '../../src/adapters/images/image-catalog.js';
import { QemuHypervisor, type QemuOptions } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { SilentLogger } from '../fakes/fakes.js';
import { writeSaved } from '../../src/adapters/hypervisor/qemu/saved-state.js';

/** `failing` words for a start that dies at its first `cont` (see SCRIPT). */
export const DIES_AT_CONT = '@dies-at-cont';

/**
 * A stand-in for qemu-system-x86_64 (a Node script) for tests of the QEMU adapter's control flow:
 * each start appends its arguments to `calls.jsonl` beside it and every QMP command it gets to
 * `qmp.jsonl`; the starts listed in `fail.json` (by number, with the words to print) print them,
 * as QEMU would, and exit 1. The others serve QMP on the `-qmp` socket: an incoming or outgoing
 * migration is `completed` at once, `migrate` to `unix:PATH` writes `state of start N` there, a
 * shared memory file (`memory-backend-file,...,share=on`) gets `memory of start N`, `quit` exits;
 * it writes its pid to the `-pidfile`. A start whose words are DIES_AT_CONT starts and loads, and
 * exits without a word at its first `cont` (as QEMU 7.2 did, flushing a restored guest's packets
 * into a network not yet attached). With `-netdev stream` it listens on the NIC's socket and, when
 * svc-netd (or a test's stand-in) connects, notes `(network attached)` in `qmp.jsonl` and says
 * NETDEV_STREAM_CONNECTED on its monitor, as QEMU does.
 */
const SCRIPT = `#!/usr/bin/env node
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const here = path.dirname(process.argv[1]);
const DIES_AT_CONT = '${DIES_AT_CONT}';
const args = process.argv.slice(2);
fs.appendFileSync(path.join(here, 'calls.jsonl'), JSON.stringify(args) + '\\n');
const n = fs.readFileSync(path.join(here, 'calls.jsonl'), 'utf8').trim().split('\\n').length;
const fail = JSON.parse(fs.readFileSync(path.join(here, 'fail.json'), 'utf8'))[n];
if (fail && fail !== DIES_AT_CONT) { process.stderr.write(fail + '\\n'); process.exit(1); }
for (const a of args) {
  const m = /^memory-backend-file,.*mem-path=([^,]+),share=on$/.exec(a);
  if (m) fs.writeFileSync(m[1], 'memory of start ' + n);
}
if (args.includes('-pidfile')) fs.writeFileSync(args[args.indexOf('-pidfile') + 1], String(process.pid));
const qmp = args[args.indexOf('-qmp') + 1].replace(/^unix:/, '').split(',')[0];
const monitors = new Set();
const stream = args.map((a) => /^stream,id=net0,.*addr.path=([^,]+)/.exec(a)).find(Boolean);
if (stream) fs.rmSync(stream[1], { force: true }); // as QEMU does before it binds
if (stream)
  net.createServer((c) => {
    c.on('error', () => undefined);
    fs.appendFileSync(path.join(here, 'qmp.jsonl'), JSON.stringify([n, '(network attached)', null]) + '\\n');
    for (const m of monitors) m.write(JSON.stringify({ event: 'NETDEV_STREAM_CONNECTED', data: { 'netdev-id': 'net0' } }) + '\\n');
  }).listen(stream[1]);
net.createServer((s) => {
  monitors.add(s);
  s.write(JSON.stringify({ QMP: { version: {}, capabilities: [] } }) + '\\n');
  let buf = '';
  s.on('data', (d) => {
    buf += d;
    for (let i; (i = buf.indexOf('\\n')) >= 0;) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      fs.appendFileSync(path.join(here, 'qmp.jsonl'), JSON.stringify([n, msg.execute, msg.arguments ?? null]) + '\\n');
      if (msg.execute === 'cont' && fail === DIES_AT_CONT) process.exit(139);
      const ret = msg.execute === 'query-migrate' ? { status: 'completed' } : msg.execute === 'query-status' ? { status: 'paused' } : {};
      s.write(JSON.stringify({ return: ret }) + '\\n');
      if (msg.execute === 'migrate') {
        const out = net.connect(msg.arguments.uri.replace(/^unix:/, ''));
        out.end('state of start ' + n);
      }
      if (msg.execute === 'quit') setTimeout(() => process.exit(0), 10);
    }
  });
}).listen(qmp);
`;

export interface FakeQemu {
  /** The stand-in binary (QemuOptions.qemuBinary). */
  binary: string;
  /** Images directory with one kernel image, `tiny`. */
  images: string;
  /** Starts that fail, by number (1 is the first), with what QEMU prints. */
  failing(starts: Record<number, string>): void;
  /** Every start's arguments, in order. */
  calls(): string[][];
  /** Every QMP command: [start, command, arguments]. */
  qmp(): [number, string, Record<string, unknown> | null][];
  /** A stopped VM's directory (a qcow2 header without a backing file as its disk) and spec. */
  vm(name: string): VmSpec;
  /** The same, suspended with a stream. */
  suspendedVm(name: string): Promise<VmSpec>;
}

export function installFakeQemu(root: string): FakeQemu {
  const bin = join(root, 'bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'qemu'), SCRIPT);
  chmodSync(join(bin, 'qemu'), 0o755);
  writeFileSync(join(bin, 'fail.json'), '{}');
  const img = join(root, 'images', 'tiny');
  mkdirSync(img, { recursive: true });
  for (const f of ['vmlinux', 'disk.qcow2']) writeFileSync(join(img, f), '');
  writeFileSync(
    join(img, 'manifest.json'),
    JSON.stringify({
      format: 1,
      kernel: 'vmlinux',
      disk: 'disk.qcow2',
      disk_gb: 1,
      cmdline: 'console=ttyS0',
      ssh_user: 'root',
      agent_ready: true,
    }),
  );
  const lines = (f: string) =>
    readFileSync(join(bin, f), 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  const vm = (name: string): VmSpec => {
    const dir = join(root, 'vms', name);
    mkdirSync(dir, { recursive: true });
    const head = Buffer.alloc(104);
    head.writeUInt32BE(0x514649fb, 0);
    head.writeUInt32BE(3, 4);
    writeFileSync(join(dir, 'disk.qcow2'), head);
    return { name, dir, cpus: 1, memory_mb: 128, disk_gb: 1, image: 'tiny', hostname: name, forwards: [], mounts: [] };
  };
  return {
    binary: join(bin, 'qemu'),
    images: join(root, 'images'),
    failing: (starts) => writeFileSync(join(bin, 'fail.json'), JSON.stringify(starts)),
    calls: () => lines('calls.jsonl'),
    qmp: () => lines('qmp.jsonl'),
    vm,
    suspendedVm: async (name) => {
      const spec = vm(name);
      writeFileSync(join(spec.dir, 'state.mig'), 'saved');
      await writeSaved(spec.dir, { kind: 'stream', file: 'state.mig' });
      return spec;
    },
  };
}

/** The QEMU adapter driving the stand-in `q` (TCG, no vsock, 9p), with `more` options. */
export function qemuOn(q: FakeQemu, more: Partial<QemuOptions> = {}): QemuHypervisor {
  return new QemuHypervisor({
    qemuBinary: q.binary,
    accel: 'tcg',
    images: new ImageCatalog(q.images),
    log: new SilentLogger(),
    vsock: false,
    mountDriver: '9p',
    ...more,
  });
}
