import { stat } from 'node:fs/promises';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { Mount } from '../../domain/instance.js';

/** Every hypervisor shares host folders the same way: each `host` must be an existing directory. */
export async function checkHostDirs(mounts: Mount[]): Promise<void> {
  for (const [i, m] of mounts.entries()) {
    const st = await stat(m.host).catch(() => undefined);
    if (!st?.isDirectory()) throw new InvalidArgumentError(`mounts[${i}].host: ${m.host} is not an existing directory`);
  }
}
