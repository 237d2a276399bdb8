import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import { parseMode, type CopyMode, type FsInfo } from '../../domain/agent.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { UploadQuery } from '../../domain/query.js';
import { GuestFiles } from '../../ports/agent/guest-files.js';
import { absolutePath } from './agent-service.js';

export type PutOptions = UploadQuery;

/** cp and fs use cases of the agent: input checks, then the GuestFiles port. */
@injectable()
export class FileService {
  constructor(@inject(GuestFiles) private readonly files: GuestFiles) {}

  async put(o: PutOptions, body: Readable): Promise<void> {
    const path = absolutePath(o.path);
    if (o.mode === 'tar')
      return this.files.extractTar(
        path,
        body,
        o.uid !== undefined || o.gid !== undefined ? { uid: o.uid, gid: o.gid } : undefined,
      );
    const mode = parseMode(o.permissions, 0o644);
    if (Number.isNaN(mode)) throw new InvalidArgumentError('permissions must be an octal string such as "0644"');
    await this.files.writeFile(path, body, { mode, uid: o.uid, gid: o.gid });
  }

  async get(path: string, mode: CopyMode): Promise<{ contentType: string; size?: number; body: Readable }> {
    absolutePath(path);
    if (mode === 'tar') return { contentType: 'application/x-tar', body: await this.files.packTar(path) };
    const f = await this.files.readFile(path);
    return { contentType: 'application/octet-stream', size: f.size, body: f.body };
  }

  readdir(path: string): Promise<FsInfo[]> {
    return this.files.readdir(absolutePath(path));
  }

  stat(path: string): Promise<FsInfo> {
    return this.files.stat(absolutePath(path));
  }

  async mkdir(body: unknown): Promise<void> {
    const b = objectBody(body, ['path', 'recursive', 'mode']);
    if (b.recursive !== undefined && typeof b.recursive !== 'boolean')
      throw new InvalidArgumentError('recursive must be a boolean');
    const mode = parseMode(b.mode, 0o755);
    if (Number.isNaN(mode)) throw new InvalidArgumentError('mode must be an octal string such as "0755"');
    await this.files.mkdir(absolutePath(b.path), b.recursive === true, mode);
  }

  async symlink(body: unknown): Promise<void> {
    const b = objectBody(body, ['path', 'target']);
    if (typeof b.target !== 'string' || b.target === '' || b.target.includes('\0'))
      throw new InvalidArgumentError('target is required');
    await this.files.symlink(absolutePath(b.path), b.target);
  }

  async remove(path: string, recursive: boolean): Promise<void> {
    const p = absolutePath(path);
    // normalized: `//`, `/tmp/..` and `/.` are / too
    if (posix.normalize(p) === '/') throw new InvalidArgumentError('refusing to remove /');
    await this.files.remove(p, recursive);
  }
}

function objectBody(body: unknown, allowed: string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new InvalidArgumentError('body must be a JSON object');
  for (const k of Object.keys(body)) if (!allowed.includes(k)) throw new InvalidArgumentError(`unknown field "${k}"`);
  return body as Record<string, unknown>;
}
