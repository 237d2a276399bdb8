import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, lstatSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { request, Agent } from 'node:http';
import type { Writable } from 'node:stream';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { SvcClient } from '../src/index.js';
import { ensureImage } from '../test/e2e/image.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** One row of a benchmark's table. */
export type Row = (...c: (string | number)[]) => void;

/**
 * The config of a daemon on real QEMU with the minimal image, as the guest benchmarks run it
 * (no stats history, a TCG-sized ready timeout), with `extra` on top.
 */
export function minimalQemu(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    hypervisor: 'qemu',
    images_dir: ensureImage('minimal'),
    image: 'minimal',
    memory_mb: 384,
    sandbox_metrics_enabled: false,
    ready_timeout: '240s',
    // Every create boots unless a benchmark measures snapshot creates (bench/snapshot-creates.ts).
    create_from_snapshot: false,
    ...extra,
  };
}
const SVCD = join(REPO, 'dist', 'src', 'bin', 'svcd.js');

export interface Stats {
  n: number;
  p50: number;
  p95: number;
  mean: number;
  min: number;
  max: number;
}

export function stats(xs: number[]): Stats {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * (s.length - 1) + 0.5))];
  return {
    n: s.length,
    p50: at(0.5),
    p95: at(0.95),
    mean: s.reduce((a, b) => a + b, 0) / s.length,
    min: s[0],
    max: s[s.length - 1],
  };
}

export function rssKiB(pid: number, field: 'VmRSS' | 'VmHWM' = 'VmRSS'): number {
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}

/**
 * A process's resident memory in KiB from smaps_rollup: Rss, Pss (shared pages split among their
 * sharers) and its anonymous memory (its own: what it would give back by exiting, unlike file pages).
 */
export function memoryKiB(pid: number): { rss: number; pss: number; anon: number } {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { rss: field('Rss'), pss: field('Pss'), anon: field('Anonymous') };
}

/** CPU seconds (user + system) a process has used so far, from /proc (clock ticks of 1/100 s). */
/** The pid of a VM's QEMU, from the record in a daemon's data dir (0 when it runs none). */
export function qemuPidOf(dir: string, vm: string): number {
  const rec = JSON.parse(readFileSync(join(dir, 'data', 'vms', vm, 'instance.json'), 'utf8')) as {
    runtime?: { pid?: number };
  };
  return rec.runtime?.pid ?? 0;
}

export function cpuSeconds(pid: number, withChildren = false): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime, stime; cutime, cstime: children that have exited and been waited for (the daemon's svc-splice).
  return (Number(fields[11]) + Number(fields[12]) + (withChildren ? Number(fields[13]) + Number(fields[14]) : 0)) / 100;
}

/** The process listening on 127.0.0.1:`port` (TCP), found through /proc; undefined if none is visible. */
export function pidListeningOn(port: number): number | undefined {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[1].endsWith(`:${hex}`) && f[3] === '0A') inodes.add(f[9]);
    }
  }
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m && inodes.has(m[1])) return Number(pid);
      }
    } catch {
      // gone, or not ours to read
    }
  }
  return undefined;
}

/** Resets a process's peak RSS (VmHWM) so the next peak belongs to what follows. */
export function resetPeak(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

export interface Daemon {
  proc: ChildProcess;
  socket: string;
  port: number;
  client: SvcClient;
  /** The daemon's log records (pino's JSON lines) whose `msg` is `msg`, in order, as they came. */
  logged(msg: string): Record<string, unknown>[];
  stop(): Promise<void>;
}

/** Node's flags for a CPU profile of a process the bench starts, written into BENCH_SVCD_PROF when it exits. */
export function profiling(): string[] {
  return process.env.BENCH_SVCD_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_SVCD_PROF] : [];
}

/** Runs svcd as its own process (so its memory is its own) with the given config. */
export async function startSvcd(dir: string, config: Record<string, unknown>): Promise<Daemon> {
  const socket = join(dir, 'svc.sock');
  const yaml = Object.entries({ data_dir: join(dir, 'data'), socket, api: '127.0.0.1:0', log_level: 'info', ...config })
    .map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v === '' ? "''" : v}`)
    .join('\n');
  writeFileSync(join(dir, 'config.yaml'), yaml + '\n');
  const proc = spawn(process.execPath, [...profiling(), SVCD, '--config', join(dir, 'config.yaml')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let port = 0;
  if (process.env.BENCH_SVCD_LOG) proc.stderr!.pipe(createWriteStream(process.env.BENCH_SVCD_LOG, { flags: 'a' }));
  const records: Record<string, unknown>[] = [];
  let partial = '';
  proc.stderr!.on('data', (c: Buffer) => {
    const lines = (partial + c.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        const r = JSON.parse(line) as Record<string, unknown>;
        if (typeof r.tcp_port === 'number') port = r.tcp_port;
        if (records.length < 100_000) records.push(r);
      } catch {
        // not a record of pino's
      }
    }
  });
  const client = new SvcClient({ socket, env: {} });
  for (let i = 0; i < 200 && !port; i++) await new Promise((r) => setTimeout(r, 50));
  if (!port) throw new Error('svcd did not start');
  return {
    proc,
    socket,
    port,
    client,
    logged: (msg) => records.filter((r) => r.msg === msg),
    stop: async () => {
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await gone;
    },
  };
}

/** One HTTP POST with a kept-alive agent; resolves when the body is read. */
export function post(
  agent: Agent,
  target: { socketPath?: string; port?: number },
  path: string,
  token?: string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        ...target,
        host: '127.0.0.1',
        method: 'POST',
        path,
        headers: token ? { authorization: `Bearer ${token}` } : {},
      },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/**
 * A direct client of an agent's exec channel (GET /exec/channel, docs/agent.md), as the daemon
 * uses it: `call` runs one buffered exec of `query` and resolves when its answer arrives.
 */
export async function execChannel(port: number): Promise<{ call(query: string): Promise<void>; close(): void }> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/exec/channel`, { perMessageDeflate: false });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const waiting = new Map<number, (ok: boolean) => void>();
  ws.on('message', (data) => {
    const m = JSON.parse(String(data)) as { id: number; result?: unknown };
    waiting.get(m.id)?.(m.result !== undefined);
    waiting.delete(m.id);
  });
  let id = 0;
  return {
    call: (query) =>
      new Promise<void>((resolve, reject) => {
        const n = ++id;
        waiting.set(n, (ok) => (ok ? resolve() : reject(new Error(`exec channel call ${n} failed`))));
        ws.send(JSON.stringify({ id: n, query }));
      }),
    close: () => ws.close(),
  };
}

export function fmt(n: number, digits = 1): string {
  return Number.isFinite(n) ? n.toFixed(digits) : '-';
}

/** Writes `total` bytes of `chunk` copies with backpressure, then ends the stream. */
export function pump(w: Writable, chunk: Buffer, total: number): void {
  let sent = 0;
  const more = () => {
    while (sent < total) {
      sent += chunk.length;
      if (!w.write(chunk)) return void w.once('drain', more);
    }
    w.end();
  };
  more();
}

export interface Target {
  port?: number;
  socketPath?: string;
  path: string;
}

/** PUTs `total` bytes (a repeated 1 MiB chunk) with their Content-Length; resolves on a 2xx. */
export function putBytes(t: Target & { method: string }, total: number): Promise<void> {
  const chunk = Buffer.alloc(1024 * 1024, 7);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: t.port,
        socketPath: t.socketPath,
        path: t.path,
        method: t.method,
        headers: { 'content-type': 'application/octet-stream', 'content-length': String(total) },
      },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode! < 300 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    pump(req, chunk, total);
  });
}

/** GETs a body and throws it away; rejects on a non-2xx. */
export function fetchAll(t: Target): Promise<void> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port: t.port, socketPath: t.socketPath, path: t.path }, (res) => {
      if (res.statusCode! >= 300) reject(new Error(`status ${res.statusCode}`));
      res.on('data', () => undefined);
      res.on('end', resolve);
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

/**
 * Disk use of VM directories as the filesystem allocates it: each file counted once by inode; an
 * inode linked from more than one place (a shared layer) goes to `shared`, the rest to its directory.
 */
export function diskUse(dirs: string[]): { own: number[]; shared: number } {
  const seen = new Set<string>();
  let shared = 0;
  const own = dirs.map((dir) => {
    let bytes = 0;
    for (const name of readdirSync(dir)) {
      const st = lstatSync(join(dir, name));
      if (!st.isFile()) continue;
      const key = `${st.dev}:${st.ino}`;
      if (st.nlink > 1) {
        if (!seen.has(key)) shared += st.blocks * 512;
        seen.add(key);
      } else {
        bytes += st.blocks * 512;
      }
    }
    return bytes;
  });
  return { own, shared };
}

/**
 * Times each target once per round, the order rotated every round, so the noise of a shared machine
 * (a TCG guest's exec alone varies by tens of ms) falls on all of them alike. Besides each target's
 * samples, `paired` holds each target's time minus `base`'s in the same round: the median of those
 * is the overhead with the round-to-round noise taken out, where the difference of two p50s keeps it.
 */
export async function rounds(
  targets: Record<string, () => Promise<unknown>>,
  n: number,
  base: string,
): Promise<{ samples: Record<string, number[]>; paired: Record<string, number[]> }> {
  const keys = Object.keys(targets);
  const samples: Record<string, number[]> = Object.fromEntries(keys.map((k) => [k, []]));
  for (let i = 0; i < n; i++) {
    const round: Record<string, number> = {};
    for (let j = 0; j < keys.length; j++) {
      const k = keys[(i + j) % keys.length];
      const t0 = process.hrtime.bigint();
      await targets[k]();
      round[k] = Number(process.hrtime.bigint() - t0) / 1e6;
    }
    for (const k of keys) samples[k].push(round[k]);
  }
  const paired = Object.fromEntries(
    keys.filter((k) => k !== base).map((k) => [k, samples[k].map((x, i) => x - samples[base][i])]),
  );
  return { samples, paired };
}
