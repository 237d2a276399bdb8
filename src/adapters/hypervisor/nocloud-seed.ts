import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { InternalError } from '../../domain/errors.js';

const run = promisify(execFile);

export interface SeedData {
  instanceId: string;
  hostname: string;
  authorizedKeys: string[];
  userdata?: string;
}

/** meta-data in the NoCloud format cloud-init reads (and the project's own init parses). */
export function metaData(s: SeedData): string {
  const keys = s.authorizedKeys.map((k) => `  - ${k.trim()}`).join('\n');
  return `instance-id: ${s.instanceId}\nlocal-hostname: ${s.hostname}\n${keys ? `public-keys:\n${keys}\n` : ''}`;
}

/**
 * Writes the VM's cloud-init NoCloud seed as an ISO 9660 image labelled `cidata`, so stock cloud
 * images and the project's own image read the same hostname, SSH key and userdata.
 */
export async function writeSeed(path: string, s: SeedData): Promise<void> {
  const dir = await mkdtemp(`${path}.d-`);
  try {
    await writeFile(join(dir, 'meta-data'), metaData(s));
    await writeFile(join(dir, 'user-data'), s.userdata ?? '#cloud-config\n{}\n');
    await run('genisoimage', ['-quiet', '-output', path, '-volid', 'cidata', '-joliet', '-rock', dir]);
  } catch (err) {
    throw new InternalError(`cannot write the cloud-init seed: ${(err as Error).message}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
