import { expect } from 'chai';
import { orAfter } from '../../../../src/adapters/process-kit/or-after.js';

describe('orAfter', () => {
  it("gives the promise's value when it comes first", async () => {
    expect(await orAfter(Promise.resolve(7), 1000, 'late')).to.equal(7);
  });

  it('gives the fallback once the time is up', async () => {
    const never = new Promise<number>(() => undefined);
    const t0 = Date.now();
    expect(await orAfter(never, 30, 'late')).to.equal('late');
    expect(Date.now() - t0).to.be.at.least(25);
  });

  it("passes on the promise's rejection", async () => {
    const err = await orAfter(Promise.reject(new Error('boom')), 1000, 'late').then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.equal('boom');
  });

  it('clears its timer when the promise comes first', async () => {
    const [set, clear] = [globalThis.setTimeout, globalThis.clearTimeout];
    const made: unknown[] = [];
    const cleared: unknown[] = [];
    globalThis.setTimeout = ((...a: Parameters<typeof setTimeout>) => {
      const t = set(...a);
      made.push(t);
      return t;
    }) as typeof setTimeout;
    globalThis.clearTimeout = ((t: Parameters<typeof clearTimeout>[0]) => {
      cleared.push(t);
      clear(t);
    }) as typeof clearTimeout;
    try {
      await orAfter(Promise.resolve(1), 60_000, 0);
    } finally {
      globalThis.setTimeout = set;
      globalThis.clearTimeout = clear;
    }
    expect(made).to.have.length(1);
    expect(cleared).to.include(made[0]);
  });
});
