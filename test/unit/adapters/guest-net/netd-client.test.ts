import { expect } from 'chai';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NetdClient } from '../../../../src/adapters/guest-net/netd-client.js';
import { UnavailableError } from '../../../../src/domain/errors.js';
import { SilentLogger } from '../../../fakes/fakes.js';

describe("the daemon's line to svc-netd (NetdClient)", () => {
  it('once closed, sends nothing more and starts no svc-netd: a stopped daemon cannot touch the networks a new one runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-netd-client-'));
    try {
      // A program that is not there: had the client tried to start svc-netd, the error would say so.
      const c = new NetdClient({ dataDir: dir, log: new SilentLogger(), script: join(dir, 'no-such-netd.js') });
      c.close();
      const err = await c.call({ op: 'detach', vm: 'main' }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err).to.be.instanceOf(UnavailableError);
      expect(err!.message).to.match(/line is closed \(detach not sent\)/);
      const stop = c.onEgress(() => undefined);
      stop();
      await new Promise((r) => setTimeout(r, 50));
      expect(readdirSync(dir), 'no control socket, no log: nothing was started').to.deep.equal([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
