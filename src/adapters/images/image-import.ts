import { execFile } from 'node:child_process';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { InvalidArgumentError } from '../../domain/errors.js';
import { LIMITS } from '../../domain/create-request.js';
import type { ImageProgress } from '../../ports/guest-images.js';
import { childEnv } from '../process-kit/child-env.js';
import { roomIn } from '../fs-kit/free-room.js';
import { sniffImportFile } from './import-files.js';
import { checkLayers, imageEnvScript, readOciLayout, UNPACKED_CAP } from './oci-layout.js';
import { skopeoWords, type SkopeoSource } from './registry-pull.js';

const run = promisify(execFile);

/** How long a pull from a registry may take. */
const PULL_TIMEOUT_MS = 60 * 60_000;

/** What an import is told besides its source. */
export interface ImportMeta {
  id: string;
  ssh_user?: string;
  description?: string;
}

/** Runs a build step; the caller turns its progress lines into events (image-catalog's runBuild). */
export type BuildRunner = (
  argv: string[],
  progress: (p: ImageProgress) => void,
  env?: Record<string, string>,
) => Promise<void>;

/**
 * A container image archive (`oci-archive` or `docker-archive`, as podman save, docker save and
 * skopeo copy write them) as skopeo's source. InvalidArgumentError for a file that is not such an
 * archive.
 */
export async function archiveSource(
  file: string,
  type: 'oci-archive' | 'docker-archive',
  work: string,
): Promise<SkopeoSource> {
  await sniffImportFile(file, type);
  // skopeo reads "type:path[:ref]": a link with a plain name keeps colons in the real path out of it.
  const src = join(work, 'source.tar');
  await symlink(file, src);
  return { ref: `${type}:${src}`, flags: [], label: `${type}:${file.split('/').pop()}` };
}

/**
 * A container image (an archive, or an image in a registry: `archiveSource`, `registrySource`)
 * into a golden image in `out`: skopeo copies it into an OCI layout, every layer entry is checked
 * (nothing climbs out of the root), and build-image.sh (kind oci) applies the layers with umoci
 * and adds svc's init, node and agent under /opt/svc. InvalidArgumentError for what skopeo cannot
 * read.
 */
export async function importContainer(
  source: SkopeoSource,
  out: string,
  work: string,
  meta: ImportMeta,
  build: { script: string; agentDir: string; run: BuildRunner },
  progress: (p: ImageProgress) => void,
): Promise<void> {
  const pull = source.ref.startsWith('docker://');
  progress({
    percent: 5,
    message: pull ? `pulling ${source.label} with skopeo` : `reading the ${source.label.split(':')[0]} with skopeo`,
  });
  const layout = join(work, 'oci');
  try {
    await run('skopeo', ['--insecure-policy', 'copy', '-q', ...source.flags, source.ref, `oci:${layout}:svc`], {
      env: { ...childEnv(), TMPDIR: work },
      maxBuffer: 1 << 20,
      timeout: pull ? PULL_TIMEOUT_MS : 0,
    });
  } catch (err) {
    const why = skopeoWords(err);
    throw new InvalidArgumentError(
      pull ? `from: ${source.label}: ${why}` : `from: ${source.label} is not a readable archive: ${why}`,
    );
  }
  progress({ percent: 20, message: 'checking the layers' });
  const img = await readOciLayout(layout);
  const room = await roomIn(work, 3, UNPACKED_CAP, 'the build holds the tree, the ext4 disk made of it and its qcow2');
  await checkLayers(img.layers, room);
  const envFile = join(work, 'image.env');
  await writeFile(envFile, imageEnvScript(img.config));
  const cfgFile = join(work, 'image-config.json');
  await writeFile(
    cfgFile,
    JSON.stringify({
      os: `container image (${img.os}/${img.architecture})`,
      source: meta.description ?? source.label,
      config: img.config,
    }),
  );
  await build.run(['bash', build.script, out, build.agentDir, 'oci'], progress, {
    SVC_OCI_LAYOUT: layout,
    SVC_IMAGE_ENV: envFile,
    SVC_IMAGE_CONFIG: cfgFile,
    TMPDIR: work,
  });
}

interface QemuImgInfo {
  format: string;
  'virtual-size': number;
  'backing-filename'?: string;
  'format-specific'?: { data?: { 'data-file'?: string } };
}

/**
 * A disk that boots on its own (a distribution's cloud image: qcow2 or raw, with its bootloader;
 * readyDisk unpacks one shipped compressed) into a golden image in `out`, copied into a fresh qcow2.
 * VMs of it boot through the firmware, get the NoCloud seed and are reached over SSH until the
 * agent is deployed. InvalidArgumentError for a file that is neither a qcow2 nor a raw disk with
 * a partition table, and for a qcow2 that names a backing or data file (it would read host files).
 */
export async function importDisk(
  file: string,
  out: string,
  meta: ImportMeta,
  progress: (p: ImageProgress) => void,
  /** What the disk is called in messages and the manifest's source: `disk:NAME`, or the URL it came from. */
  label = `disk:${file.split('/').pop()}`,
): Promise<void> {
  progress({ percent: 5, message: 'checking the disk' });
  await sniffImportFile(file, 'disk', label);
  let info: QemuImgInfo;
  try {
    const { stdout } = await run('qemu-img', ['info', '--output=json', file], { env: childEnv(), maxBuffer: 1 << 20 });
    info = JSON.parse(stdout) as QemuImgInfo;
  } catch (err) {
    throw new InvalidArgumentError(
      `from: ${label} is not a disk image qemu-img can read: ${((err as { stderr?: string }).stderr ?? '').trim().slice(0, 300)}`,
    );
  }
  if (info.format === 'qcow2') {
    if (info['backing-filename'] || info['format-specific']?.data?.['data-file']) {
      throw new InvalidArgumentError(
        `from: ${label} is a qcow2 that reads another file (backing or data file); flatten it first (qemu-img convert -O qcow2)`,
      );
    }
  } else if (info.format !== 'raw') {
    throw new InvalidArgumentError(`from: ${label} is a ${info.format} image; import a qcow2 or a raw disk`);
  }
  // A VM's disk is at least its image's size, and creates stop at LIMITS.disk_gb: a larger image
  // could never be used (a qcow2 header can claim a petabyte in a few hundred bytes).
  const gb = Math.ceil(info['virtual-size'] / 2 ** 30);
  const max = LIMITS.disk_gb[1];
  if (!Number.isSafeInteger(info['virtual-size']) || info['virtual-size'] <= 0 || gb > max) {
    throw new InvalidArgumentError(
      `from: ${label} is a disk of ${gb} GB; at most ${max} GB can be imported (the largest disk a VM may have)`,
    );
  }
  await mkdir(out, { recursive: true });
  progress({ percent: 15, message: `copying the ${info.format} disk` });
  await run('qemu-img', ['convert', '-q', '-f', info.format, '-O', 'qcow2', file, join(out, 'disk.qcow2')], {
    env: childEnv(),
  });
  progress({ percent: 95, message: 'writing the manifest' });
  await writeFile(
    join(out, 'manifest.json'),
    JSON.stringify(
      {
        id: meta.id,
        format: 1,
        os: 'imported disk',
        description: meta.description ?? `imported from ${label}`,
        kernel: '',
        initrd: '',
        disk: 'disk.qcow2',
        disk_gb: Math.max(1, gb),
        cmdline: '',
        ssh_user: meta.ssh_user ?? 'root',
        agent_ready: false,
        boot: 'firmware',
        source: label,
      },
      null,
      2,
    ) + '\n',
  );
}
