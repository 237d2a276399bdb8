import { expect } from 'chai';
import { RegistryBases } from '../../../../src/adapters/e2b/registry-bases.js';
import type { SvcClient } from '../../../../src/adapters/client/svc-client.js';
import type { ImageDetails } from '../../../../src/ports/guest-images.js';

/** The images a stand-in daemon has: id, when it was made (minutes), and what uses it. */
function daemon(images: [id: string, minute: number, inUse?: string[]][], refuse: string[] = []) {
  const held = new Map(
    images.map(([id, minute, inUse]) => [
      id,
      { id, created_at: new Date(Date.UTC(2026, 0, 1, 0, minute)).toISOString(), in_use_by: inUse ?? [] },
    ]),
  );
  const client = {
    listImages: async () => [...held.values()] as ImageDetails[],
    deleteImage: async (id: string) => {
      if (refuse.includes(id)) throw new Error(`image ${id} is in use`);
      held.delete(id);
      return { message: `image ${id} deleted`, id };
    },
  };
  return { client: client as unknown as SvcClient, left: () => [...held.keys()].sort() };
}

const A = 'reg-aaaaaaaaaaaaaaaa';
const B = 'reg-bbbbbbbbbbbbbbbb';

describe('E2B registry bases: older versions pruned', () => {
  it('keeps the newest version of each reference and what something uses; the rest goes', async () => {
    const d = daemon([
      [A, 1], // named before versions were (one per reference)
      [`${A}-000000000001`, 2],
      [`${A}-000000000002`, 3, ['e2b-tpl-1']],
      [`${A}-000000000003`, 4],
      [`${B}-000000000001`, 5],
      ['debian', 0],
      ['reg-not-ours', 0],
    ]);
    const gone = await new RegistryBases(d.client).prune();
    expect(gone.sort()).to.deep.equal([A, `${A}-000000000001`]);
    expect(d.left()).to.deep.equal(
      [`${A}-000000000002`, `${A}-000000000003`, `${B}-000000000001`, 'debian', 'reg-not-ours'].sort(),
    );
  });

  it("keeps a version a build under way was given until the build lets it go, and one the daemon's delete refuses", async () => {
    const d = daemon(
      [
        [`${A}-000000000001`, 1],
        [`${A}-000000000002`, 2],
        [`${A}-000000000003`, 3],
      ],
      [`${A}-000000000002`],
    );
    const bases = new RegistryBases(d.client);
    const release = bases.hold({ create: { image: `${A}-000000000001` } });
    const again = bases.hold({ create: { image: `${A}-000000000001` } });
    expect(bases.hold({ create: { from: 'a-template' } })).to.be.a('function');
    expect(await bases.prune(), 'held, and refused').to.deep.equal([]);
    release();
    release(); // once only: the second build still holds it
    expect(await bases.prune()).to.deep.equal([]);
    again();
    expect(await bases.prune()).to.deep.equal([`${A}-000000000001`]);
    expect(d.left()).to.deep.equal([`${A}-000000000002`, `${A}-000000000003`]);
  });
});
