import {
  copyFileSync,
  cpSync,
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
} from 'node:fs';
import { join } from 'node:path';
import { ImageSnapshots } from '../../src/app/image-snapshots.js';
import type { DaemonOverrides } from '../../src/main.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { E2E_IMAGES, ensureImage, lockedAsync } from './image.js';

/**
 * Image snapshots made once per run and given to the e2e daemons that create many VMs of one shape
 * (docs/snapshot-creates.md): their creates restore a booted guest (about a second under TCG)
 * instead of booting one (10 to 30 s), and none of them spends a capture of its own. A seed is what
 * a daemon left in its data dir after capturing one shape: the snapshot, and the SSH key its guest
 * was given (part of the snapshot's key, so a daemon seeded with it uses the same key). A daemon
 * checks a seeded snapshot as one it made itself: one made of other inputs (another QEMU, a rebuilt
 * image) is dropped and captured again.
 */
export interface SeedShape {
  kind: 'minimal' | 'debian';
  memory_mb: number;
}

/** The shapes the e2e files that restore their creates use (their daemons' `memory_mb`, 1 cpu, the default disk). */
export const SEED_SHAPES: SeedShape[] = [
  { kind: 'minimal', memory_mb: 384 },
  { kind: 'minimal', memory_mb: 512 },
  { kind: 'debian', memory_mb: 768 },
];

const SEEDS = join(E2E_IMAGES, '..', 'snapshot-seeds');
/** The SSH key every seed's guest was given (a snapshot's key includes it), kept across runs. */
const SEED_SSH = join(SEEDS, 'ssh');
const seedDir = (s: SeedShape) => {
  const inputs = readFileSync(join(E2E_IMAGES, s.kind, '.inputs'), 'utf8').slice(0, 16);
  return join(SEEDS, `${s.kind}-${s.memory_mb}-${inputs}`);
};

/**
 * Captures the seed of `shape` unless it is there: scripts/test.sh has the e2e images step make
 * them before the tier; a test file run alone makes its own once (e2e workers take turns).
 */
export async function ensureSeed(shape: SeedShape): Promise<void> {
  ensureImage(shape.kind);
  const out = seedDir(shape);
  if (existsSync(out)) return;
  await lockedAsync(join(SEEDS, '.lock'), async () => {
    if (existsSync(out)) return;
    const work = tempDir('svc-seed-');
    if (existsSync(SEED_SSH)) cpSync(SEED_SSH, join(work, 'data', 'ssh'), { recursive: true });
    // The snapshot's disk names its image by full path: the built images, which outlive this process.
    const d = await startTestDaemon(
      { hypervisor: 'qemu', images_dir: E2E_IMAGES, memory_mb: shape.memory_mb, create_from_snapshot: true },
      {},
      work,
    );
    try {
      await d.daemon.container.get(ImageSnapshots).prepareImage(shape.kind, { cpus: 1, memory_mb: shape.memory_mb });
    } finally {
      await d.daemon.stop(); // its files stay (TestDaemon.stop would remove them)
    }
    const made = readdirSync(join(work, 'data', 'snapshots')).filter((k) =>
      existsSync(join(work, 'data', 'snapshots', k, 'snapshot.json')),
    );
    if (made.length !== 1) throw new Error(`the capture of ${shape.kind} (${shape.memory_mb} MB) made no snapshot`);
    if (!existsSync(SEED_SSH)) cpSync(join(work, 'data', 'ssh'), SEED_SSH, { recursive: true });
    // Seeds of this shape made of older inputs are never used again.
    const prefix = `${shape.kind}-${shape.memory_mb}-`;
    for (const old of readdirSync(SEEDS)) if (old.startsWith(prefix)) rmSync(join(SEEDS, old), { recursive: true });
    renameSync(join(work, 'data', 'snapshots'), `${out}.tmp`);
    renameSync(`${out}.tmp`, out);
    rmSync(work, { recursive: true, force: true });
  });
}

/**
 * Gives the daemon that will run over `dir` (startTestDaemon's third argument) the seeds of
 * `shapes`: their files linked (no VM writes a snapshot's files; a daemon that drops one unlinks
 * its own names only) and the seeds' SSH key. Returns `dir`.
 */
export function seeded(shapes: SeedShape[], dir = tempDir()): string {
  const data = join(dir, 'data');
  for (const s of shapes) {
    const from = seedDir(s);
    if (!existsSync(from)) throw new Error(`no seed of ${s.kind} (${s.memory_mb} MB): await ensureSeed first`);
    if (!existsSync(join(data, 'ssh'))) cpSync(SEED_SSH, join(data, 'ssh'), { recursive: true });
    for (const key of readdirSync(from)) {
      const to = join(data, 'snapshots', key);
      mkdirSync(to, { recursive: true, mode: 0o700 });
      for (const f of readdirSync(join(from, key))) {
        try {
          linkSync(join(from, key, f), join(to, f));
        } catch {
          copyFileSync(join(from, key, f), join(to, f));
        }
      }
    }
  }
  return dir;
}

/**
 * A QEMU test daemon (startTestDaemon) whose creates of `shape` restore its seed: the seed made
 * first if this run has none yet, its image the default one, `memory_mb` and
 * `create_from_snapshot` set to match.
 */
export async function startSeededDaemon(
  shape: SeedShape,
  raw: Record<string, unknown>,
  overrides: DaemonOverrides = {},
): Promise<TestDaemon> {
  await ensureSeed(shape);
  const d = await startTestDaemon(
    {
      hypervisor: 'qemu',
      images_dir: ensureImage(shape.kind),
      image: shape.kind,
      ...raw,
      memory_mb: shape.memory_mb,
      create_from_snapshot: true,
    },
    overrides,
    seeded([shape]),
  );
  // It captures nothing of its own (another shape, an image a test bakes): a capture boots a guest
  // in the background, on the CPU the tests' own guests wait on. Captures are tested in
  // qemu-snapshot-creates.test.ts, whose daemons make them.
  const captureNothing = () => (d.daemon.container.get(ImageSnapshots).prepare = () => Promise.resolve());
  captureNothing();
  const restart = d.restart.bind(d);
  d.restart = async () => {
    await restart();
    captureNothing();
  };
  return d;
}
