import { InvalidArgumentError } from './errors.js';
import { assertVmName } from './names.js';

/** An image id: what `images_dir/<id>` and `image:` in a create take. */
export const IMAGE_ID = /^[a-z0-9][a-z0-9._-]{0,62}$/;

export interface RecipeFile {
  path: string;
  /** The file's bytes. */
  content: Buffer;
  mode: number;
}

/** POST /images from a recipe: a base image plus packages, files, environment and shell lines. */
export interface ImageRecipe {
  kind: 'recipe';
  name: string;
  from: string;
  packages: string[];
  run: string[];
  files: RecipeFile[];
  env: Record<string, string>;
  description?: string;
}

/** POST /images from a VM: bake a stopped VM's disk into a golden image (grain's bake). */
export interface ImageBake {
  kind: 'bake';
  name: string;
  from_vm: string;
  description?: string;
}

/** A file on the daemon's host: a container image archive or a disk with its own bootloader. */
export interface FileSource {
  type: 'oci-archive' | 'docker-archive' | 'disk';
  /** An absolute host path; the daemon reads it only inside its import_dirs. */
  path: string;
}

/** A container image in a registry (`docker://REF`), pulled by the daemon. */
export interface RegistrySource {
  type: 'docker';
  /** The reference made whole: `REGISTRY/PATH` with `:TAG` or `@sha256:DIGEST` (normalRegistryRef). */
  ref: string;
  /** A private registry's login: handed to the pull alone, never kept, logged or answered. */
  auth?: RegistryAuth;
}

export interface RegistryAuth {
  username: string;
  password: string;
}

/**
 * A disk with its own bootloader at an http(s) URL (a distribution's cloud image), downloaded by
 * the daemon. Plain HTTP only with a digest: the digest, not the connection, vouches for it then.
 */
export interface UrlSource {
  type: 'url';
  url: string;
  /** `sha256:HEX` or `sha512:HEX`, as the distribution's SHA256SUMS or SHA512SUMS give it. */
  digest?: string;
}

/** Where an imported image comes from. */
export type ImageSource = FileSource | RegistrySource | UrlSource;

/** A source as a POST /images `from` gives it. */
export function sourceLabel(s: ImageSource): string {
  return s.type === 'docker' ? `docker://${s.ref}` : s.type === 'url' ? s.url : `${s.type}:${s.path}`;
}

/** How a daemon lets imports reach: the host folders files come from, the registries reached without TLS. */
export interface ImportRules {
  /** import_dirs: no folder, no file imported. */
  dirs: readonly string[];
  /** insecure_registries: `HOST[:PORT]`s pulled from over plain HTTP or unchecked TLS. */
  insecureRegistries: readonly string[];
}

/** POST /images from a file on the daemon's host (`from: "oci-archive:PATH"` and the like). */
export interface ImageImport {
  kind: 'import';
  name: string;
  source: ImageSource;
  /** The user the daemon logs in as over SSH (disk images); default root. */
  ssh_user?: string;
  description?: string;
}

export type ImageRequest = ImageRecipe | ImageBake | ImageImport;

export const IMPORT_TYPES = ['oci-archive', 'docker-archive', 'disk'] as const;

const REF_PART = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const REF_DOMAIN =
  '(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?';
const REGISTRY_REF = new RegExp(
  `^(?:(${REF_DOMAIN})/)?(${REF_PART}(?:/${REF_PART})*)(?::([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(sha256:[a-f0-9]{64}))?$`,
);

/**
 * A registry reference as Docker reads it, made whole: a first part without a `.` or `:` (and not
 * `localhost`) is a name on Docker Hub (`docker.io`, under `library/` when it has one part), and no
 * tag or digest means `:latest`. InvalidArgumentError for anything else.
 */
export function normalRegistryRef(text: string, what = 'from'): string {
  const m = text.length <= 512 ? REGISTRY_REF.exec(text) : null;
  if (!m)
    throw new InvalidArgumentError(
      `${what}: ${JSON.stringify(text.slice(0, 80))} is not a registry reference such as python:3.12 or ghcr.io/org/app:1.0`,
    );
  const [, first, rest, tag, digest] = m;
  const hub = !first || (!/[.:]/.test(first) && first !== 'localhost');
  const domain = hub ? 'docker.io' : first;
  let path = hub && first ? `${first}/${rest}` : rest;
  if (hub && !path.includes('/')) path = `library/${path}`;
  if (path.length > 255) throw new InvalidArgumentError(`${what}: the repository name is longer than 255 characters`);
  return `${domain}/${path}${tag || !digest ? `:${tag ?? 'latest'}` : ''}${digest ? `@${digest}` : ''}`;
}

/** The registry (`HOST[:PORT]`) a whole reference names. */
export const registryOf = (ref: string): string => ref.slice(0, ref.indexOf('/'));

/** The repository a normalRegistryRef names, without its tag or digest (`docker.io/library/python`). */
export const repositoryOf = (ref: string): string =>
  ref.replace(/@sha256:[a-f0-9]{64}$/, '').replace(/:[A-Za-z0-9_][A-Za-z0-9_.-]*$/, '');

function registryAuth(v: unknown): RegistryAuth {
  const o = obj(v, 'registry_auth');
  for (const k of Object.keys(o))
    if (k !== 'username' && k !== 'password') throw new InvalidArgumentError(`registry_auth: unknown field "${k}"`);
  for (const k of ['username', 'password'] as const) {
    const x = o[k];
    if (typeof x !== 'string' || x === '' || x.length > 4096 || /[\0\r\n]/.test(x))
      throw new InvalidArgumentError(`registry_auth.${k} must be a one-line string`);
  }
  if ((o.username as string).includes(':')) throw new InvalidArgumentError('registry_auth.username may not hold a ":"');
  return { username: o.username as string, password: o.password as string };
}
const USER = /^[a-z_][a-z0-9_-]{0,31}$/;

function sshUser(v: unknown): string | undefined {
  if (v !== undefined && (typeof v !== 'string' || !USER.test(v)))
    throw new InvalidArgumentError('ssh_user must be a user name');
  return v as string | undefined;
}

export const RECIPE_LIMITS = { packages: 200, run: 100, files: 100, fileBytes: 1 << 20, env: 100 } as const;

const PACKAGE = /^[a-z0-9][a-z0-9+.-]{0,127}(=[A-Za-z0-9.+~:-]{1,64})?$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

function obj(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new InvalidArgumentError(`${what} must be a JSON object`);
  return v as Record<string, unknown>;
}

function list(v: unknown, what: string, max: number): unknown[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw new InvalidArgumentError(`${what} must be an array`);
  if (v.length > max) throw new InvalidArgumentError(`${what}: at most ${max} entries`);
  return v;
}

export function assertImageId(v: unknown, what = 'name'): string {
  if (typeof v !== 'string' || !IMAGE_ID.test(v)) {
    throw new InvalidArgumentError(
      `${what} must be an image name: lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63`,
    );
  }
  return v;
}

/** An import takes its source as it is: a recipe's fields (and `more`) are refused, saying so. */
function asItIs(b: Record<string, unknown>, from: string, what: string, more: string[] = []): void {
  for (const k of ['packages', 'run', 'files', 'env', ...more]) {
    if (b[k] !== undefined)
      throw new InvalidArgumentError(
        `from ${from}: imports ${what} as it is; ${k} belongs to a recipe (build one from the imported image)`,
      );
  }
}

const DIGEST = /^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;

/** An http(s) URL of a disk, and its digest when given (see UrlSource). */
function urlSource(text: string, digest: unknown): UrlSource {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new InvalidArgumentError(`from: ${JSON.stringify(text.slice(0, 80))} is not a URL`);
  }
  if (text.length > 4096 || url.username || url.password)
    throw new InvalidArgumentError('from: a URL of at most 4096 characters, without a user or password in it');
  if (digest !== undefined && (typeof digest !== 'string' || !DIGEST.test(digest)))
    throw new InvalidArgumentError('digest must be sha256:HEX (64 digits) or sha512:HEX (128), lowercase');
  if (url.protocol === 'http:' && digest === undefined)
    throw new InvalidArgumentError(
      `from: ${url.origin} is plain HTTP; give the image's digest (sha256:… or sha512:…, from its SHA256SUMS or SHA512SUMS) or an https URL`,
    );
  return { type: 'url', url: url.href, ...(digest === undefined ? {} : { digest: digest as string }) };
}

/**
 * Validates a POST /images/resolve body: `{from: "docker://REF", registry_auth?}`, what a pull of
 * it would be given. Throws InvalidArgumentError naming the field.
 */
export function parseRegistryResolve(body: unknown): RegistrySource {
  const b = obj(body, 'resolve request');
  for (const k of Object.keys(b))
    if (k !== 'from' && k !== 'registry_auth')
      throw new InvalidArgumentError(`unknown field "${k}" (fields: from, registry_auth)`);
  if (typeof b.from !== 'string' || !b.from.startsWith('docker://'))
    throw new InvalidArgumentError('from must be an image in a registry: docker://REF');
  const source: RegistrySource = { type: 'docker', ref: normalRegistryRef(b.from.slice('docker://'.length)) };
  if (b.registry_auth !== undefined) source.auth = registryAuth(b.registry_auth);
  return source;
}

/** Validates a POST /images body. Throws InvalidArgumentError naming the field. */
export function parseImageRequest(body: unknown): ImageRequest {
  const b = obj(body, 'image request');
  const allowed = [
    'name',
    'from',
    'from_vm',
    'packages',
    'run',
    'files',
    'env',
    'description',
    'ssh_user',
    'registry_auth',
    'digest',
  ];
  for (const k of Object.keys(b))
    if (!allowed.includes(k)) throw new InvalidArgumentError(`unknown field "${k}" (fields: ${allowed.join(', ')})`);
  const name = assertImageId(b.name);
  if (name === 'default') throw new InvalidArgumentError('name: "default" names the default image; choose another');
  const description = b.description === undefined ? undefined : String(b.description).slice(0, 500);
  if (b.from_vm !== undefined) {
    for (const k of ['from', 'packages', 'run', 'files', 'env', 'ssh_user', 'registry_auth', 'digest']) {
      if (b[k] !== undefined)
        throw new InvalidArgumentError(`from_vm bakes a VM's disk as it is; ${k} belongs to a recipe`);
    }
    return { kind: 'bake', name, from_vm: assertVmName(b.from_vm), description };
  }
  if (b.from === undefined)
    throw new InvalidArgumentError(
      'give from (a base image such as "debian", "oci-archive:PATH", "docker-archive:PATH", "disk:PATH", "docker://REF" or a disk\'s https:// URL) or from_vm (a stopped VM)',
    );
  if (typeof b.from === 'string' && b.from.startsWith('docker://')) {
    asItIs(b, 'docker://', 'an image', ['ssh_user']);
    const ref = normalRegistryRef(b.from.slice('docker://'.length));
    const source: RegistrySource = { type: 'docker', ref };
    if (b.registry_auth !== undefined) source.auth = registryAuth(b.registry_auth);
    return { kind: 'import', name, source, description };
  }
  if (b.registry_auth !== undefined)
    throw new InvalidArgumentError('registry_auth belongs to a pull (from: "docker://REF")');
  if (typeof b.from === 'string' && /^https?:\/\//i.test(b.from)) {
    asItIs(b, 'a URL', 'a disk');
    const ssh_user = sshUser(b.ssh_user);
    return { kind: 'import', name, source: urlSource(b.from, b.digest), ssh_user, description };
  }
  if (b.digest !== undefined) throw new InvalidArgumentError("digest belongs to an import from a disk's URL");
  const scheme = typeof b.from === 'string' ? /^([a-z-]+):(.*)$/s.exec(b.from) : null;
  if (scheme) {
    const type = scheme[1] as FileSource['type'];
    if (!(IMPORT_TYPES as readonly string[]).includes(type))
      throw new InvalidArgumentError(
        `from: unknown source "${scheme[1]}:" (${IMPORT_TYPES.map((t) => `${t}:PATH`).join(', ')}, docker://REF)`,
      );
    const path = scheme[2];
    if (!path.startsWith('/') || path.includes('\0') || path.length > 4096)
      throw new InvalidArgumentError(`from: ${type}: takes an absolute path on the daemon's host`);
    asItIs(b, type, 'a file');
    return { kind: 'import', name, source: { type, path }, ssh_user: sshUser(b.ssh_user), description };
  }
  if (b.ssh_user !== undefined)
    throw new InvalidArgumentError('ssh_user belongs to an import of a disk (from: "disk:PATH" or its URL)');
  const from = assertImageId(b.from, 'from');
  const packages = list(b.packages, 'packages', RECIPE_LIMITS.packages).map((p, i) => {
    if (typeof p !== 'string' || !PACKAGE.test(p))
      throw new InvalidArgumentError(`packages[${i}]: ${JSON.stringify(p)} is not a Debian package name`);
    return p;
  });
  const run = list(b.run, 'run', RECIPE_LIMITS.run).map((l, i) => {
    if (typeof l !== 'string' || l.trim() === '' || l.includes('\0'))
      throw new InvalidArgumentError(`run[${i}] must be a non-empty shell line`);
    return l;
  });
  const files = list(b.files, 'files', RECIPE_LIMITS.files).map((f, i) => {
    const o = obj(f, `files[${i}]`);
    for (const k of Object.keys(o))
      if (!['path', 'content', 'mode'].includes(k)) throw new InvalidArgumentError(`files[${i}]: unknown field "${k}"`);
    if (
      typeof o.path !== 'string' ||
      !o.path.startsWith('/') ||
      o.path.includes('\0') ||
      o.path.split('/').includes('..')
    ) {
      throw new InvalidArgumentError(`files[${i}].path must be an absolute guest path without ..`);
    }
    if (typeof o.content !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(o.content))
      throw new InvalidArgumentError(`files[${i}].content must be base64`);
    const content = Buffer.from(o.content, 'base64');
    if (content.length > RECIPE_LIMITS.fileBytes)
      throw new InvalidArgumentError(`files[${i}]: larger than ${RECIPE_LIMITS.fileBytes} bytes`);
    const modeText = o.mode === undefined ? '0644' : o.mode;
    if (typeof modeText !== 'string' || !/^0?[0-7]{3,4}$/.test(modeText))
      throw new InvalidArgumentError(`files[${i}].mode must be an octal string such as "0644"`);
    return { path: o.path, content, mode: parseInt(modeText, 8) };
  });
  const envObj = b.env === undefined ? {} : obj(b.env, 'env');
  if (Object.keys(envObj).length > RECIPE_LIMITS.env)
    throw new InvalidArgumentError(`env: at most ${RECIPE_LIMITS.env} variables`);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(envObj)) {
    if (!ENV_KEY.test(k)) throw new InvalidArgumentError(`env: ${JSON.stringify(k)} is not a variable name`);
    if (typeof v !== 'string' || /[\0\n]/.test(v)) throw new InvalidArgumentError(`env.${k} must be a one-line string`);
    env[k] = v;
  }
  return { kind: 'recipe', name, from, packages, run, files, env, description };
}
