import { expect } from 'chai';
import { statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { roomIn } from '../../../../src/adapters/fs-kit/free-room.js';

describe('adapters/fs-kit/roomIn', () => {
  it('is the cap where the folder holds it the times asked, otherwise that share of what is free, saying so', async () => {
    const fs = statfsSync(tmpdir());
    const free = fs.bavail * fs.bsize;
    const small = { bytes: 1024, why: 'a small cap' };
    expect(await roomIn(tmpdir(), 2, small, 'two copies')).to.equal(small);
    const room = await roomIn(tmpdir(), 3, { bytes: 2 ** 60, why: 'an exabyte' }, 'three copies');
    // what is free moves while the test runs: within a MiB of a third of it
    expect(Math.abs(room.bytes - free / 3)).to.be.below(2 ** 20);
    expect(room.why).to.match(/^1\/3 of the [\d.]+ [KMGT]?i?B free: three copies$/);
  });
});
