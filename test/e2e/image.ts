import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { tempDir, type TestDaemon } from '../helpers/daemon.js';
import type { Reply } from '../helpers/http.js';
import { builtinInputs } from '../../src/adapters/images/image-builds.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
/** The built images, shared by runs and by the e2e workers of one run (keyed by their inputs). */
export const E2E_IMAGES = join(REPO, '.svc-test', 'images');
const built = new Set<string>();
let mine: string | undefined;

/** What an image is built from: the daemon's own inputs (the recipes, the agent bundle and its addons), the kernel, node. */
function inputsKey(kind: string): string {
  const inputs = builtinInputs();
  if (!inputs) throw new Error('run npm run build:agent first');
  const h = createHash('sha256').update(kind).update(inputs);
  h.update(readdirSync('/lib/modules').sort().join(',')).update(process.version);
  return h.digest('hex');
}

const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Takes `lock` (a directory: made by one process at a time) if it is free; a lock older than an hour is a dead run's. */
function tryLock(lock: string): boolean {
  mkdirSync(dirname(lock), { recursive: true });
  try {
    mkdirSync(lock);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const age = Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
    if (age > 3600_000) rmSync(lock, { recursive: true, force: true });
    return false;
  }
}

/**
 * Runs `fn` holding `lock`, so e2e workers running in parallel build a thing once and never remove
 * it under one another.
 */
function locked<T>(lock: string, fn: () => T): T {
  while (!tryLock(lock)) sleep(500);
  try {
    return fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** `locked` for work that awaits. */
export async function lockedAsync<T>(lock: string, fn: () => Promise<T>): Promise<T> {
  while (!tryLock(lock)) await new Promise((r) => setTimeout(r, 500));
  try {
    return await fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * Builds one of the project's guest images (`minimal`, `debian`) once per test run, and across runs
 * only when its inputs changed: the images live under `.svc-test/images`, keyed by a hash of what
 * they are built from. Returns this process's images directory: links to the built images, and
 * room for what its tests import, bake or build (workers running at once do not see one another's).
 */
export function ensureImage(kind: 'minimal' | 'debian' = 'minimal'): string {
  // Made again for the next test file of this worker once the last one's temp dirs went (root-hooks.ts).
  if (!mine || !existsSync(mine)) {
    built.clear();
    mine = tempDir('svc-e2e-images-');
    chmodSync(mine, 0o755); // QEMU runs as nobody (qemu.user) and reads the images through it
  }
  if (built.has(kind)) return mine;
  if (!existsSync(join(REPO, 'dist', 'agent', 'svc-agent.cjs'))) throw new Error('run npm run build:agent first');
  const out = join(E2E_IMAGES, kind);
  const key = inputsKey(kind);
  const stamp = join(out, '.inputs');
  const current = () =>
    existsSync(join(out, 'manifest.json')) && existsSync(stamp) && readFileSync(stamp, 'utf8') === key;
  if (!current()) {
    locked(join(E2E_IMAGES, `.lock-${kind}`), () => {
      if (current()) return;
      const tmp = join(E2E_IMAGES, `.build-${kind}-${process.pid}`);
      rmSync(tmp, { recursive: true, force: true });
      execFileSync('bash', [join(REPO, 'image', 'build-image.sh'), tmp, join(REPO, 'dist', 'agent'), kind], {
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      writeFileSync(join(tmp, '.inputs'), key);
      // stamped as the daemon stamps its own builds, so a daemon sees it current (not outdated)
      const manifest = JSON.parse(readFileSync(join(tmp, 'manifest.json'), 'utf8')) as Record<string, unknown>;
      writeFileSync(join(tmp, 'manifest.json'), JSON.stringify({ ...manifest, inputs_digest: builtinInputs() }));
      rmSync(out, { recursive: true, force: true });
      renameSync(tmp, out);
    });
  }
  symlinkSync(out, join(mine, kind));
  built.add(kind);
  return mine;
}

/** QEMU processes of VMs with these names under `dataDir` (other runs may have VMs of the same names) that still run. */
export function qemuProcesses(dataDir: string, names: string[]): string[] {
  return qemuUnder(dataDir).filter((l) =>
    names.some((n) => l.includes(`process=svc-${n} `) || l.includes(`process=svc-${n},`)),
  );
}

function pgrepLines(pattern: string): string[] {
  try {
    return execFileSync('pgrep', ['-af', pattern], { encoding: 'utf8' }).split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

/**
 * The command line of the QEMU the record of `vm` (under `dataDir`) names, or undefined when none
 * runs. A clone's QEMU may have been started ahead as its template's spare, under the spare's name.
 */
export function qemuOfVm(dataDir: string, vm: string): string | undefined {
  const rec = JSON.parse(readFileSync(join(dataDir, 'vms', vm, 'instance.json'), 'utf8')) as {
    runtime?: { pid?: number };
  };
  try {
    return readFileSync(`/proc/${rec.runtime?.pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return undefined;
  }
}

/** Every QEMU process of VMs (or spares) whose files are under `dataDir`, whatever its name. */
export function qemuUnder(dataDir: string): string[] {
  return pgrepLines('process=svc-').filter((l) => l.includes(`${join(dataDir, 'vms')}/`));
}

/** Every QEMU process whose files are under `dataDir`: VMs, spares, image snapshots' guests. */
export function everyQemuUnder(dataDir: string): string[] {
  return pgrepLines('process=svc-').filter((l) => l.includes(`${dataDir}/`));
}

/** The QEMU processes of image snapshots (their guests being captured) under `dataDir`. */
export function snapshotQemus(dataDir: string): string[] {
  return pgrepLines('process=svc-svc-snapshot-').filter((l) => l.includes(`${join(dataDir, 'snapshots')}/`));
}

/**
 * QEMU processes started as spares for the next clone of templates under `dataDir` that no clone
 * has taken yet (a clone that takes one keeps its command line, but the spare's directory goes).
 */
export function waitingSpares(dataDir: string): string[] {
  return pgrepLines('process=svc-spare-').filter((l) => {
    const dir = /-pidfile (\S+)\/qemu\.pid/.exec(l)?.[1];
    return dir?.startsWith(join(dataDir, 'vms')) && existsSync(dir);
  });
}

/**
 * A test fixture made by a script under test/e2e/fixtures (a cloud disk built from Debian packages,
 * say), built once and kept under `.svc-test/fixtures` keyed by the script's content. Returns its path.
 */
export function ensureFixture(script: string, ext: string): string {
  const src = join(REPO, 'test', 'e2e', 'fixtures', script);
  const key = createHash('sha256')
    .update(readFileSync(src))
    .update(readdirSync('/lib/modules').sort().join(','))
    .digest('hex')
    .slice(0, 16);
  const dir = join(REPO, '.svc-test', 'fixtures');
  const base = script.replace(/\.sh$/, '');
  const out = join(dir, `${base}-${key}.${ext}`);
  if (!existsSync(out)) {
    locked(join(dir, `.lock-${base}`), () => {
      if (existsSync(out)) return;
      for (const old of readdirSync(dir).filter((n) => n.startsWith(base))) rmSync(join(dir, old), { force: true });
      execFileSync('bash', [src, `${out}.tmp`], { stdio: ['ignore', 'ignore', 'inherit'] });
      renameSync(`${out}.tmp`, out);
    });
  }
  return out;
}

/** A guest console's kernel fault lines (BUG, RIP, the call trace), or what it ends with when it has none. */
export function consoleFaults(file: string): string {
  let lines: string[];
  try {
    lines = readFileSync(file, 'utf8').split('\n');
  } catch (err) {
    return `(no console: ${(err as Error).message})`;
  }
  const at = lines.findIndex((l) => /BUG:|Oops:|general protection/.test(l));
  return (at < 0 ? lines.slice(-10) : lines.slice(at, at + 40)).join('\n');
}

/**
 * `POST /vms/{source}/fork` that must succeed (201, or 200 with no error line when streamed). A fork that died on waking (issue 42, rare) makes
 * the call fail and the daemon remove every fork of it, keeping their logs in `data_dir/logs`: the
 * failure carries each kept console's fault lines with the call trace, which the daemon's own
 * message leaves out.
 */
export async function forkOk(d: TestDaemon, source: string, body: object, query = ''): Promise<Reply> {
  const r = await d.call('POST', `/vms/${source}/fork${query}`, body);
  // A streamed answer is 200 with the error, if any, on its last line.
  const failed = /stream=1/.test(query) ? r.status !== 200 || /"phase":"error"/.test(r.text) : r.status !== 201;
  if (!failed) return r;
  const logs = join(d.config.data_dir, 'logs');
  let kept: string[] = [];
  try {
    kept = readdirSync(logs).filter((f) => f.endsWith('-serial.log'));
  } catch {
    // no log kept
  }
  const faults = kept.map((f) => `${f}:\n${consoleFaults(join(logs, f))}`).join('\n');
  throw new Error(`fork of ${source}: ${r.status} ${r.text}\n${faults || '(no console kept)'}`);
}

/**
 * `work` with guests `vms` of `d`, failed when it has not ended in `ms`; a failure carries each
 * guest's record and its console's fault lines. A fork that faulted (issue 42, rare) answers
 * nothing, resets its agent or goes to error: the call trace names the fault.
 */
export async function withConsoles<T>(d: TestDaemon, vms: string[], work: Promise<T>, ms = 180_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${vms.join(', ')}: no answer in ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } catch (err) {
    const about: string[] = [];
    for (const vm of vms) {
      const rec = await d.call('GET', `/vms/${vm}`).then(
        (r) => r.text,
        (e: Error) => `(no record: ${e.message})`,
      );
      about.push(`${vm}: ${rec}\nits console:\n${consoleFaults(join(d.config.data_dir, 'vms', vm, 'serial.log'))}`);
    }
    throw new Error(`${(err as Error).message}\n${about.join('\n')}`);
  } finally {
    clearTimeout(timer);
  }
}
