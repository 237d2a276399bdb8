import { readFileSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { RECIPE_LIMITS } from '../../domain/image-request.js';
import { parseYaml } from '../config/yaml-config-file.js';

/** A recipe as POST /images takes it, without its name (the command's argument gives it). */
export interface RecipeBody {
  from?: string;
  packages: string[];
  run: string[];
  files: { path: string; content: string; mode: string }[];
  env: Record<string, string>;
  description?: string;
}

const FIELDS = ['from', 'packages', 'run', 'files', 'env', 'description'];
/** What the daemon takes in one file: a larger one is refused here, before it is read. */
const FILE_MAX = RECIPE_LIMITS.fileBytes;

/**
 * `svc image build NAME -f RECIPE`: a recipe kept in a file, YAML or JSON (JSON is YAML), as the
 * API's body with two differences for people writing it by hand: a file's `content` is text, or it
 * names a local file with `source` (relative to the recipe's folder) and is sent as its bytes; and
 * the image's name is the command's. The daemon checks the rest (package names, paths, sizes).
 */
export function readRecipe(path: string): RecipeBody {
  const where = (what: string) => `${path}: ${what}`;
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(where((err as Error).message.split('\n')[0]));
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw new Error(where(`a recipe is a mapping of ${FIELDS.join(', ')}`));
  const r = doc as Record<string, unknown>;
  for (const k of Object.keys(r))
    if (!FIELDS.includes(k)) throw new Error(where(`unknown field "${k}" (fields: ${FIELDS.join(', ')})`));
  const text = (v: unknown, what: string): string => {
    if (typeof v === 'string') return v;
    if (typeof v === 'number' || typeof v === 'boolean') return String(v);
    throw new Error(where(`${what} must be text`));
  };
  const list = (v: unknown, what: string): string[] => {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) throw new Error(where(`${what} must be a list`));
    return v.map((x, i) => text(x, `${what}[${i}]`));
  };
  const env: Record<string, string> = {};
  if (r.env !== undefined && r.env !== null) {
    if (typeof r.env !== 'object' || Array.isArray(r.env))
      throw new Error(where('env must be a mapping of NAME: value'));
    for (const [k, v] of Object.entries(r.env)) env[k] = text(v, `env.${k}`);
  }
  const files = (r.files === undefined || r.files === null ? [] : r.files) as unknown;
  if (!Array.isArray(files)) throw new Error(where('files must be a list of {path, content or source, mode}'));
  return {
    from: r.from === undefined ? undefined : text(r.from, 'from'),
    packages: list(r.packages, 'packages'),
    run: list(r.run, 'run'),
    files: files.map((f, i) => fileEntry(f, `files[${i}]`, dirname(resolve(path)), where)),
    env,
    description: r.description === undefined ? undefined : text(r.description, 'description'),
  };
}

function fileEntry(
  f: unknown,
  what: string,
  base: string,
  where: (s: string) => string,
): { path: string; content: string; mode: string } {
  if (typeof f !== 'object' || f === null || Array.isArray(f))
    throw new Error(where(`${what} must be a mapping of path, content or source, mode`));
  const o = f as Record<string, unknown>;
  for (const k of Object.keys(o))
    if (!['path', 'content', 'source', 'mode'].includes(k))
      throw new Error(where(`${what}: unknown field "${k}" (path, content, source, mode)`));
  if (typeof o.path !== 'string') throw new Error(where(`${what}.path must be the file's path in the guest`));
  if ((o.content === undefined) === (o.source === undefined))
    throw new Error(where(`${what}: give content (its text) or source (a local file), one of them`));
  // YAML reads 0640 as the number 640: a mode is written quoted, so it is the octal the user meant.
  if (o.mode !== undefined && typeof o.mode !== 'string')
    throw new Error(where(`${what}.mode: write it quoted, as an octal string such as "0640"`));
  let bytes: Buffer;
  if (o.source !== undefined) {
    if (typeof o.source !== 'string') throw new Error(where(`${what}.source must be a local file's path`));
    const local = resolve(base, o.source);
    const st = statSync(local, { throwIfNoEntry: false });
    if (!st?.isFile()) throw new Error(where(`${what}.source: ${local} is not a file`));
    if (st.size > FILE_MAX) throw new Error(where(`${what}.source: ${local} is larger than ${FILE_MAX} bytes`));
    bytes = readFileSync(local);
  } else {
    if (typeof o.content !== 'string') throw new Error(where(`${what}.content must be text`));
    bytes = Buffer.from(o.content);
  }
  return { path: o.path, content: bytes.toString('base64'), mode: o.mode ?? '0644' };
}
