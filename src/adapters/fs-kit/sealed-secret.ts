import { createDecipheriv } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { SecretRecord } from '../../domain/events.js';
import { SECRET_NAME_RE } from '../../domain/names.js';

/**
 * A host secret as it is kept: `<data_dir>/secrets/<name>.json`, its value sealed with AES-256-GCM
 * under the 32-byte key in `<data_dir>/secret.key`, the name bound in as associated data.
 */
export interface StoredSecret extends SecretRecord {
  iv: string;
  tag: string;
  ciphertext: string;
}

export const secretFile = (dataDir: string, name: string) => join(dataDir, 'secrets', `${name}.json`);
export const secretKeyFile = (dataDir: string) => join(dataDir, 'secret.key');

/** The value sealed in `s` under `key` for `name`; throws when it does not authenticate. */
export function openSealed(key: Buffer, name: string, s: StoredSecret): Buffer {
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(s.iv, 'base64'));
  decipher.setAAD(Buffer.from(name));
  decipher.setAuthTag(Buffer.from(s.tag, 'base64'));
  return Buffer.concat([decipher.update(Buffer.from(s.ciphertext, 'base64')), decipher.final()]);
}

/**
 * A secret's value as it is now (svc-netd asks at each request, so a new value takes the next
 * one); undefined when there is no such secret, or it does not open. What was read is kept while
 * the secret's file and the key are the files they were (a stat each, not a read and a decrypt).
 */
export class SealedSecretReader {
  private readonly kept = new Map<string, { stamp: string; value: Buffer }>();

  constructor(private readonly dataDir: string) {}

  async value(name: string): Promise<Buffer | undefined> {
    if (!SECRET_NAME_RE.test(name)) return undefined;
    const files = [secretKeyFile(this.dataDir), secretFile(this.dataDir, name)];
    try {
      const stamp = (await Promise.all(files.map((f) => stat(f))))
        .map((s) => `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`)
        .join('/');
      const had = this.kept.get(name);
      if (had?.stamp === stamp) return had.value;
      const [key, text] = await Promise.all([readFile(files[0]), readFile(files[1], 'utf8')]);
      const value = openSealed(key, name, JSON.parse(text) as StoredSecret);
      if (this.kept.size > 1000) this.kept.clear();
      this.kept.set(name, { stamp, value });
      return value;
    } catch {
      this.kept.delete(name);
      return undefined;
    }
  }
}
