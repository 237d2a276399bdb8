import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { injectable } from 'inversify';
import type { GuestEgress, GuestIdentity } from '../../domain/agent.js';
import { applyEgress, resumeEgress } from './egress-trust.js';
import type { SystemIdentity } from '../../ports/agent/system-identity.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

/**
 * The identity of a stand-in guest that runs on a developer's host (`--no-system-identity`:
 * fake_agent, tests): recorded in the notes directory, where its health reads the hostname back,
 * and never applied to the host.
 */
@injectable()
export class RecordedIdentity implements SystemIdentity {
  /** A stand-in's processes get the placeholders; the host's trust store is never touched. */
  async egress(e: GuestEgress, stateDir: string): Promise<void> {
    applyEgress(e, { stateDir, trustStore: false });
  }

  async resumeEgress(stateDir: string): Promise<void> {
    resumeEgress({ stateDir, trustStore: false });
  }

  async apply(id: GuestIdentity, notes: string): Promise<void> {
    await mkdir(notes, { recursive: true, mode: 0o755 });
    const entries: [string, string | undefined][] = [
      ['hostname', id.hostname],
      ['time_ms', String(id.time_ms)],
      ['machine_id', id.machine_id],
      ['disk_bytes', id.disk_bytes === undefined ? undefined : String(id.disk_bytes)],
      // A stand-in's userdata is noted, never run on the host it stands on.
      ['userdata', id.userdata],
    ];
    await Promise.all(
      entries
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => writeFileAtomic(join(notes, k), `${v}\n`, { mode: 0o644, durable: false })),
    );
  }
}
