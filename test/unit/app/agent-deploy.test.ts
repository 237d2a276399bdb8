import { expect } from 'chai';
import { Readable } from 'node:stream';
import { AgentDeployService } from '../../../src/app/agent-deploy-service.js';
import { AgentUnavailableError } from '../../../src/domain/errors.js';
import { AgentArtifact, AgentInstaller } from '../../../src/ports/tunnels.js';
import { world } from '../../fakes/world.js';

describe('app/AgentDeployService: a guest that stalls the deploy', () => {
  it('gives the deploy up when the VM is deleted: the DELETE does not wait on the guest, and the lock is free after', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'g' }, {})
    ).done;
    const installer = w.container.get<AgentInstaller>(AgentInstaller);
    const artifact = w.container.get<AgentArtifact>(AgentArtifact);
    artifact.tar = async () => Readable.from([]);
    let started!: () => void;
    const installing = new Promise<void>((r) => (started = r));
    // The guest never answers the upload; only the signal ends it (as Ssh2RemoteShell does).
    installer.install = (_t, _tar, signal) =>
      new Promise((_resolve, reject) => {
        started();
        signal?.addEventListener('abort', () => reject(new AgentUnavailableError('ssh: the command was given up')));
      });
    const deploy = w.container.get(AgentDeployService).deploy('g');
    await installing;
    const t0 = Date.now();
    const deleted = await w.svc.delete('g');
    expect(deleted.message).to.equal('vm g deleted');
    expect(Date.now() - t0).to.be.below(2000);
    const err = await deploy.catch((e) => e);
    expect(err).to.be.instanceOf(AgentUnavailableError);
    expect(w.vms.find('g')).to.equal(undefined);
  });
});
