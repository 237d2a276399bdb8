import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A stand-in for the `cloud-hypervisor` binary (a Node script) for tests of the driver without KVM:
 * it serves the REST API on `--api-socket path=...` (vmm.ping, vm.create, vm.boot, vm.pause,
 * vm.resume, vm.snapshot, vm.power-button, vmm.shutdown, vm.info), appends its arguments to
 * `calls.jsonl` and every API call to `api.jsonl` beside it, and plays the guest: once booted (or
 * restored and resumed), its vsock device's Unix socket takes hybrid vsock connections (`CONNECT
 * 7475` answered `OK ...`) to an agent that answers GET /health while the VM runs and nothing while
 * it is paused. A snapshot writes config.json (the VmConfig it was created with), state.json and
 * memory-ranges; `--restore source_url=file://DIR` starts paused from them. A file `fail-boot` beside it
 * makes vm.boot fail.
 */
const SCRIPT = String.raw`#!/usr/bin/env node
const fs = require('node:fs');
const net = require('node:net');
const http = require('node:http');
const path = require('node:path');
const here = path.dirname(process.argv[1]);
const args = process.argv.slice(2);
fs.appendFileSync(path.join(here, 'calls.jsonl'), JSON.stringify(args) + '\n');
const api = /^path=(.*)$/.exec(args[args.indexOf('--api-socket') + 1])[1];
const restore = args.includes('--restore') ? /source_url=file:\/\/(.*)$/.exec(args[args.indexOf('--restore') + 1])[1] : undefined;
let config;
let state = 'Created';
let vsock;
const record = (method, action, body) => fs.appendFileSync(path.join(here, 'api.jsonl'), JSON.stringify([process.pid, method, action, body ?? null]) + '\n');
function guest() {
  // A paused guest answers nothing, on connections it took before too, until it runs again.
  const agent = http.createServer((req, res) => {
    const answer = () => {
      if (state !== 'Running') return void setTimeout(answer, 20);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ hostname: 'stand-in', agent_version: 'stand-in', agent_uptime_sec: 1, userdata_ran: true, readiness: {} }));
    };
    answer();
  });
  try { fs.unlinkSync(config.vsock.socket); } catch {}
  vsock = net.createServer((s) => {
    s.on('error', () => {});
    let buf = '';
    const onData = (d) => {
      buf += d.toString('latin1');
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      s.off('data', onData);
      if (state !== 'Running') return; // a paused guest does not take the connection
      if (buf.slice(0, nl) !== 'CONNECT 7475') return s.destroy();
      s.write('OK 1073741824\n');
      agent.emit('connection', s);
    };
    s.on('data', onData);
  }).listen(config.vsock.socket);
}
if (restore) {
  config = JSON.parse(fs.readFileSync(path.join(restore, 'config.json'), 'utf8'));
  JSON.parse(fs.readFileSync(path.join(restore, 'state.json'), 'utf8'));
  state = 'Paused';
  guest();
}
const done = (res, code, body) => { res.statusCode = code; res.end(body === undefined ? undefined : JSON.stringify(body)); };
http.createServer((req, res) => {
  let text = '';
  req.on('data', (d) => (text += d));
  req.on('end', () => {
    const action = req.url.replace('/api/v1/', '');
    const body = text ? JSON.parse(text) : undefined;
    record(req.method, action, body);
    if (action === 'vmm.ping') return done(res, 200, { build_version: 'stand-in' });
    if (action === 'vm.info') return done(res, 200, { state, config });
    if (action === 'vm.create') { config = body; return done(res, 204); }
    if (action === 'vm.boot' && fs.existsSync(path.join(here, 'fail-boot'))) return done(res, 500, 'Error booting VM: the stand-in was told to fail');
    if (action === 'vm.boot') { state = 'Running'; guest(); return done(res, 204); }
    if (action === 'vm.pause') { state = 'Paused'; return done(res, 204); }
    if (action === 'vm.resume') { state = 'Running'; return done(res, 204); }
    if (action === 'vm.snapshot') {
      if (state !== 'Paused') return done(res, 500, 'the VM must be paused');
      const dir = body.destination_url.replace('file://', '');
      fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
      fs.writeFileSync(path.join(dir, 'state.json'), JSON.stringify({ vcpus: config.cpus.boot_vcpus }));
      fs.writeFileSync(path.join(dir, 'memory-ranges'), 'memory');
      return done(res, 204);
    }
    if (action === 'vm.power-button' || action === 'vmm.shutdown') { done(res, 204); return setTimeout(() => process.exit(0), 30); }
    done(res, 404, 'no such action');
  });
}).listen(api);
`;

export interface FakeCh {
  binary: string;
  /** Images directory with one image, `tiny` (a real 1 MiB qcow2 golden disk, a kernel file). */
  images: string;
  calls(): string[][];
  /** Every API call: [pid, method, action, body]. */
  api(): [number, string, string, Record<string, unknown> | null][];
  /** Makes the next boots fail (vm.boot answers 500). */
  failBoot(): void;
}

export function installFakeCh(root: string): FakeCh {
  const bin = join(root, 'bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'cloud-hypervisor'), SCRIPT);
  chmodSync(join(bin, 'cloud-hypervisor'), 0o755);
  const img = join(root, 'images', 'tiny');
  mkdirSync(img, { recursive: true });
  writeFileSync(join(img, 'vmlinux'), '');
  writeFileSync(join(img, 'initrd.img'), '');
  if (!existsSync(join(img, 'disk.qcow2')))
    execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', join(img, 'disk.qcow2'), '1M']);
  writeFileSync(
    join(img, 'manifest.json'),
    JSON.stringify({
      format: 1,
      kernel: 'vmlinux',
      initrd: 'initrd.img',
      disk: 'disk.qcow2',
      disk_gb: 1,
      cmdline: 'console=ttyS0 root=/dev/vda',
      ssh_user: 'root',
      agent_ready: true,
    }),
  );
  const lines = (f: string) =>
    existsSync(join(bin, f))
      ? readFileSync(join(bin, f), 'utf8')
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l))
      : [];
  return {
    binary: join(bin, 'cloud-hypervisor'),
    images: join(root, 'images'),
    calls: () => lines('calls.jsonl'),
    api: () => lines('api.jsonl'),
    failBoot: () => writeFileSync(join(bin, 'fail-boot'), ''),
  };
}
