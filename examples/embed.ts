// Runs svcd in-process with an embedder's own hypervisor adapter, then drives it with the typed
// client. `node dist/examples/embed.js` prints the lifecycle it walked; a test runs it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InMemoryHypervisor, SvcClient, buildConfig, startDaemon, type VmSpec } from '../src/index.js';

/** An embedder's adapter: here the in-memory one, logging every launch it is asked for. */
class LoggingHypervisor extends InMemoryHypervisor {
  readonly launched: string[] = [];
  override async launch(spec: VmSpec, options?: { restore?: boolean }) {
    this.launched.push(`${spec.name}${options?.restore ? ' (restore)' : ''}`);
    return super.launch(spec, options);
  }
}

const dir = mkdtempSync(join(tmpdir(), 'svc-embed-'));
const config = buildConfig({ data_dir: join(dir, 'data'), api: '', log_level: 'silent' }, {});
const hypervisor = new LoggingHypervisor({ bootDelayMs: 10 });
const daemon = await startDaemon(config, { hypervisor });
try {
  const client = new SvcClient({ socket: config.socket, env: {} });
  const vm = await client.create({ name: 'embedded', persistent: true });
  await client.suspend(vm.name);
  const restored = await client.restore(vm.name);
  await client.delete(vm.name);
  console.log(
    JSON.stringify({
      created: vm.status,
      restored: restored.status,
      // The daemon's own guests (an image snapshot being made: docs/snapshot-creates.md) go through it too.
      launched: hypervisor.launched.filter((n) => !n.startsWith('svc-snapshot-')),
      left: (await client.list()).length,
    }),
  );
} finally {
  await daemon.stop();
  rmSync(dir, { recursive: true, force: true });
}
