import { expect } from 'chai';
import { chmodSync, existsSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findHelpers, FsKeptProcesses } from '../../../../src/adapters/agent/fs-kept-processes.js';
import type { AgentService } from '../../../../src/app/agent/agent-service.js';
import { WatchService } from '../../../../src/app/agent/watch-service.js';
import { InternalError } from '../../../../src/domain/errors.js';
import type { GuestFiles } from '../../../../src/ports/agent/guest-files.js';
import { tempDir } from '../../../helpers/daemon.js';

/**
 * A helpers folder with the real svc-keep and a stand-in svc-watch (a shell script given the
 * watched path last), so that when it says ready is the test's to choose.
 */
function helpersWith(watchScript: string): string {
  const real = findHelpers();
  expect(real, 'npm run build:agent builds svc-keep').to.not.equal(null);
  const dir = tempDir('svc-helpers-');
  symlinkSync(join(real!, 'svc-keep'), join(dir, 'svc-keep'));
  writeFileSync(join(dir, 'svc-watch'), `#!/bin/sh\n${watchScript}\n`);
  chmodSync(join(dir, 'svc-watch'), 0o755);
  return dir;
}

function service(helpers: string): { watches: WatchService; kept: FsKeptProcesses } {
  const kept = new FsKeptProcesses(tempDir('svc-kept-'), helpers);
  const files = { stat: async () => ({}) } as unknown as GuestFiles;
  const agent = { hostname: async () => 'h' } as unknown as AgentService;
  return { watches: new WatchService(kept, files, agent), kept };
}

describe('app/agent/WatchService: a new watch', function () {
  this.timeout(20_000);

  it('is said to have begun only once svc-watch says its watches are in place', async () => {
    // svc-watch puts a file in the watched folder just before it says ready, half a second in
    const { watches, kept } = service(
      helpersWith(`for p; do :; done; sleep 0.5; : > "$p/in-place"; echo '{"type":"ready"}'; exec sleep 30`),
    );
    const dir = tempDir('svc-watched-');
    const w = await watches.create(dir, true);
    expect(existsSync(join(dir, 'in-place')), 'created before svc-watch was ready').to.equal(true);
    expect(w).to.include({ path: dir, recursive: true, state: 'running' });
    await kept.remove(w.id);
  });

  it('fails with what svc-watch said when it ends before it is in place, and leaves no watch', async () => {
    const { watches, kept } = service(helpersWith(`echo 'inotify_init1: Too many open files' >&2; exit 2`));
    const err = await watches.create(tempDir('svc-watched-'), false).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(InternalError);
    expect((err as Error).message).to.equal('inotify_init1: Too many open files');
    expect(await kept.list('watch')).to.deep.equal([]);
  });

  it('skips the ready line in what it reads back: the first event is the first thing done', async () => {
    const { watches, kept } = service(
      helpersWith(`echo '{"type":"ready"}'; echo '{"type":"create","path":"/x"}'; exec sleep 30`),
    );
    const ac = new AbortController();
    const events = await watches.events({ path: tempDir('svc-watched-') }, ac.signal);
    const seen = [];
    for await (const ev of events) {
      seen.push(ev);
      if (seen.length === 2) break;
    }
    ac.abort();
    expect(seen.map((e) => e.type)).to.deep.equal(['watching', 'create']);
    expect(seen[1]).to.include({
      path: '/x',
      cursor: `${seen[0].watch}:${'{"type":"ready"}\n{"type":"create","path":"/x"}\n'.length}`,
    });
    await kept.remove(String(seen[0].watch));
  });
});
