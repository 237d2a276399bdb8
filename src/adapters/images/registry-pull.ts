import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { formatBytes } from '../../domain/bytes.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { registryOf, repositoryOf, type RegistrySource } from '../../domain/image-request.js';
import { childEnv } from '../process-kit/child-env.js';
import { MAX_LAYERS } from './oci-layout.js';

const run = promisify(execFile);

/** The compressed layers one pulled image may have, in all. */
export const PULL_MAX_BYTES = 16 * 2 ** 30;
/** What a manifest (or a list of them) may weigh. */
const MANIFEST_MAX_BYTES = 4 << 20;
const INSPECT_TIMEOUT_MS = 120_000;

/** What skopeo copies from, and how: a pull pinned to the manifest that was checked. */
export interface SkopeoSource {
  /** skopeo's `TRANSPORT:REF`. */
  ref: string;
  /** Its `--src-*` flags for a copy. */
  flags: string[];
  /** How the image names its source (`docker://REF`, or the archive's type and file name). */
  label: string;
  /** A registry's image: the digest of the manifest the copy is pinned to. */
  digest?: string;
}

interface Manifest {
  schemaVersion?: number;
  mediaType?: string;
  manifests?: { digest?: string; platform?: { os?: string; architecture?: string } }[];
  layers?: { size?: number }[];
  fsLayers?: unknown[];
}

/**
 * Checks a registry's image before a byte of its layers is pulled: the linux/amd64 manifest (from
 * a list when the reference names one), at most MAX_LAYERS layers and PULL_MAX_BYTES of them.
 * Answers the copy's source pinned to that manifest's digest, so the image pulled is the one
 * checked even when the tag moves meanwhile. A login goes in an auth file (mode 0600) in `work`,
 * never on a command line. InvalidArgumentError, with the registry's words, for what it refuses.
 */
export async function registrySource(
  src: RegistrySource,
  work: string,
  insecureRegistries: readonly string[],
): Promise<SkopeoSource & { digest: string }> {
  const registry = registryOf(src.ref);
  const plainHttp = insecureRegistries.includes(registry);
  let authFile: string | undefined;
  if (src.auth) {
    authFile = join(work, 'auth.json');
    const auth = Buffer.from(`${src.auth.username}:${src.auth.password}`).toString('base64');
    await writeFile(authFile, JSON.stringify({ auths: { [registry]: { auth } } }), { mode: 0o600 });
  }
  // skopeo's flags for the registry: `--tls-verify`, `--authfile` to inspect, `--src-…` to copy
  const flagsAs = (prefix: '' | 'src-') => [
    ...(plainHttp ? [`--${prefix}tls-verify=false`] : []),
    ...(authFile ? [`--${prefix}authfile`, authFile] : []),
  ];
  const flags = flagsAs('');
  const hint = { registry, insecure: insecureRegistries };
  const repo = repositoryOf(src.ref);
  let raw = await inspect(`docker://${src.ref}`, flags, src.ref, hint);
  let manifest = parse(raw, src.ref);
  if (manifest.manifests) {
    const m = manifest.manifests.find((x) => x.platform?.os === 'linux' && x.platform.architecture === 'amd64');
    if (!m?.digest || !/^sha256:[a-f0-9]{64}$/.test(m.digest))
      throw new InvalidArgumentError(`from: docker://${src.ref} has no linux/amd64 image`);
    raw = await inspect(`docker://${repo}@${m.digest}`, flags, src.ref, hint);
    manifest = parse(raw, src.ref);
  }
  if (manifest.fsLayers || manifest.schemaVersion === 1)
    throw new InvalidArgumentError(
      `from: docker://${src.ref} has an old schema 1 manifest; push it again with a current client`,
    );
  const layers = manifest.layers;
  if (!Array.isArray(layers) || layers.length === 0)
    throw new InvalidArgumentError(`from: docker://${src.ref} answered a manifest without layers`);
  if (layers.length > MAX_LAYERS)
    throw new InvalidArgumentError(`from: docker://${src.ref} has ${layers.length} layers; at most ${MAX_LAYERS}`);
  const bytes = layers.reduce((n, l) => n + (Number.isSafeInteger(l.size) && l.size! >= 0 ? l.size! : Infinity), 0);
  if (bytes > PULL_MAX_BYTES)
    throw new InvalidArgumentError(
      `from: docker://${src.ref} has ${Number.isFinite(bytes) ? `${formatBytes(bytes)} of layers` : 'layers of no stated size'}; at most ${formatBytes(PULL_MAX_BYTES)}`,
    );
  const digest = `sha256:${createHash('sha256').update(raw).digest('hex')}`;
  return {
    ref: `docker://${repo}@${digest}`,
    flags: flagsAs('src-'),
    label: `docker://${src.ref}`,
    digest,
  };
}

function parse(raw: Buffer, ref: string): Manifest {
  try {
    const m = JSON.parse(raw.toString('utf8')) as unknown;
    if (typeof m === 'object' && m !== null && !Array.isArray(m)) return m as Manifest;
  } catch {
    // said below
  }
  throw new InvalidArgumentError(`from: docker://${ref} answered a manifest that is not JSON`);
}

async function inspect(target: string, flags: string[], ref: string, hint: PlainHttpHint): Promise<Buffer> {
  try {
    const { stdout } = await run('skopeo', ['inspect', '--raw', ...flags, target], {
      env: childEnv(),
      encoding: 'buffer',
      maxBuffer: MANIFEST_MAX_BYTES,
      timeout: INSPECT_TIMEOUT_MS,
    });
    return stdout;
  } catch (err) {
    throw new InvalidArgumentError(`from: docker://${ref}: ${skopeoWords(err, hint)}`);
  }
}

/** The registry a skopeo call reached, and those it may reach over plain HTTP. */
interface PlainHttpHint {
  registry: string;
  insecure: readonly string[];
}

/**
 * What skopeo said of a failure, shortened; with `hint`, what to do when the registry answered
 * plain HTTP and is not listed in insecure_registries.
 */
export function skopeoWords(err: unknown, hint?: PlainHttpHint): string {
  const e = err as { stderr?: string | Buffer; message?: string; killed?: boolean };
  if (e.killed) return 'the registry did not answer in time';
  const text = (e.stderr?.toString() || e.message || '').trim().split('\n').slice(-2).join(' ').slice(0, 400);
  const plain =
    hint && /server gave HTTP response to HTTPS client/.test(text) && !hint.insecure.includes(hint.registry);
  return plain ? `${text} (a registry without TLS: add ${hint.registry} to the daemon's insecure_registries)` : text;
}
