import { expect } from 'chai';
import { FileService } from '../../../../src/app/agent/file-service.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import type { GuestFiles } from '../../../../src/ports/agent/guest-files.js';

describe('app/agent/file-service remove', () => {
  /** A stand-in for the guest's files that only records: nothing here touches a real path. */
  const recorder = () => {
    const removed: string[] = [];
    const files = {
      remove: async (p: string) => void removed.push(p),
    } as unknown as GuestFiles;
    return { svc: new FileService(files), removed };
  };

  it('refuses / however it is spelled, before anything is removed', async () => {
    const { svc, removed } = recorder();
    for (const p of ['/', '//', '/tmp/..', '/./', '/tmp/../..', '///.']) {
      const err = await svc.remove(p, true).catch((e: unknown) => e);
      expect(err, p).to.be.instanceOf(InvalidArgumentError);
      expect((err as Error).message).to.equal('refusing to remove /');
    }
    expect(removed).to.deep.equal([]);
  });

  it('passes any other absolute path on', async () => {
    const { svc, removed } = recorder();
    await svc.remove('/tmp/x', false);
    expect(removed).to.deep.equal(['/tmp/x']);
  });
});
