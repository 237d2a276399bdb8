import { expect } from 'chai';
import type { IncomingMessage } from 'node:http';
import { AuthThrottle, BearerAuth } from '../../../../src/adapters/http-kit/auth.js';
import { ResourceExhaustedError } from '../../../../src/domain/errors.js';

const tcp = (headers: Record<string, string> = {}) =>
  ({ headers, socket: { remoteAddress: '127.0.0.1' } }) as unknown as IncomingMessage;
const unix = (headers: Record<string, string> = {}) => ({ headers, socket: {} }) as unknown as IncomingMessage;
const rule = { free: 3, windowMs: 60_000, perSecond: 20, maxWaiting: 4 };

describe('adapters/http-kit/AuthThrottle: guessing the token is slowed down', () => {
  it('checks at once until more than `free` wrong guesses, then a few a second, right ones paced alike', async () => {
    const auth = new BearerAuth('tok', undefined, new AuthThrottle(rule));
    const t0 = Date.now();
    for (let i = 0; i < 4; i++) expect(await auth.verify(tcp({ authorization: 'Bearer nope' }))).to.equal(false);
    expect(Date.now() - t0, 'free guesses are not paced').to.be.below(40);
    expect(auth.throttle.recentFailures()).to.equal(4);
    const t1 = Date.now();
    const answers = await Promise.all([
      auth.verify(tcp({ authorization: 'Bearer nope' })),
      auth.verify(tcp({ authorization: 'Bearer nope' })),
      auth.verify(tcp({ authorization: 'Bearer tok' })),
    ]);
    expect(answers).to.deep.equal([false, false, true]);
    // 20 a second: the third waited two slots.
    expect(Date.now() - t1).to.be.at.least(90);
    expect(auth.throttle.recentFailures(), 'the right token is no failure').to.equal(6);
  });

  it('answers 429 unchecked when too many wait, and never paces the Unix socket or a request without credentials', async () => {
    const throttle = new AuthThrottle(rule);
    const auth = new BearerAuth('tok', undefined, throttle);
    for (let i = 0; i < 4; i++) await auth.verify(tcp({ authorization: 'Bearer nope' }));
    let checked = 0;
    const waits = Array.from({ length: 6 }, () =>
      throttle.paced(tcp(), () => (checked++, false)).catch((e: unknown) => e),
    );
    const got = await Promise.all(waits);
    const refused = got.filter((g) => g instanceof ResourceExhaustedError) as ResourceExhaustedError[];
    expect(refused).to.have.length(2);
    expect(refused[0].retryAfterS).to.be.greaterThan(0);
    expect(checked, 'refused ones are not checked').to.equal(4);
    const t = Date.now();
    expect(await auth.verify(unix({ authorization: 'Bearer tok' }))).to.equal(true);
    expect(await auth.verify(tcp())).to.equal(false);
    expect(Date.now() - t).to.be.below(30);
  });

  it('lets the pace go a window after the last wrong guess', async () => {
    let now = 1_000_000;
    const throttle = new AuthThrottle(rule, () => now);
    for (let i = 0; i < 5; i++) await throttle.paced(tcp(), () => false);
    expect(throttle.recentFailures()).to.equal(5);
    now += 60_001;
    expect(throttle.recentFailures()).to.equal(0);
  });

  it("takes a cluster's token beside the daemon's own, and asks for one of them when only the cluster's is set", async () => {
    const both = new BearerAuth('tok', undefined, new AuthThrottle(rule), 'cluster-token-0123');
    expect(both.check(tcp({ authorization: 'Bearer tok' }))).to.equal(true);
    expect(both.check(tcp({ authorization: 'Bearer cluster-token-0123' }))).to.equal(true);
    expect(both.check(tcp({ authorization: 'Bearer cluster-token-012' }))).to.equal(false);
    const peerOnly = new BearerAuth('', undefined, new AuthThrottle(rule), 'cluster-token-0123');
    expect(peerOnly.enabled).to.equal(true);
    expect(peerOnly.check(tcp({}))).to.equal(false);
    expect(peerOnly.check(tcp({ authorization: 'Bearer cluster-token-0123' }))).to.equal(true);
    expect(new BearerAuth('').enabled).to.equal(false);
  });
});

describe('adapters/http-kit/BearerAuth: the cluster token', () => {
  it('tells a node (the cluster token) from a user (the API token), and no one when there is no cluster token', () => {
    const auth = new BearerAuth('tok', undefined, undefined, 'peer');
    expect(auth.isPeer(tcp({ authorization: 'Bearer peer' }))).to.equal(true);
    expect(auth.check(tcp({ authorization: 'Bearer peer' }))).to.equal(true);
    expect(auth.isPeer(tcp({ authorization: 'Bearer tok' }))).to.equal(false);
    expect(auth.isPeer(tcp({ authorization: 'Bearer peerx' }))).to.equal(false);
    expect(auth.isPeer(tcp())).to.equal(false);
    const solo = new BearerAuth('tok');
    expect(solo.isPeer(tcp({ authorization: 'Bearer tok' }))).to.equal(false);
    expect(new BearerAuth('').isPeer(tcp({ authorization: 'Bearer ' }))).to.equal(false);
  });
});
