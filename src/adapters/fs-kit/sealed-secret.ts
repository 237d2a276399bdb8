import { createDecipheriv } from 'node:crypto';
import { readFile } from 'node:fs/promises';
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
 * A secret's value read as it is now (svc-netd reads at each request, so a new value takes the
 * next one); undefined when there is no such secret, or it does not open.
 */
export async function readSealedValue(dataDir: string, name: string): Promise<Buffer | undefined> {
  if (!SECRET_NAME_RE.test(name)) return undefined;
  try {
    const [key, text] = await Promise.all([
      readFile(secretKeyFile(dataDir)),
      readFile(secretFile(dataDir, name), 'utf8'),
    ]);
    return openSealed(key, name, JSON.parse(text) as StoredSecret);
  } catch {
    return undefined;
  }
}
