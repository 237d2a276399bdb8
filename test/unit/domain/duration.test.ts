import { expect } from 'chai';
import { MAX_DURATION_MS, parseDuration } from '../../../src/domain/duration.js';

describe('domain/duration', () => {
  it('reads the forms it documents', () => {
    expect(parseDuration('90s', 't')).to.equal(90_000);
    expect(parseDuration('1h30m', 't')).to.equal(5_400_000);
    expect(parseDuration('2.5', 't')).to.equal(2500);
    expect(parseDuration('24h', 't')).to.equal(86_400_000);
  });

  it('refuses a duration longer than a timer can hold with a 400, instead of firing at once', () => {
    for (const t of ['99999999h', `${MAX_DURATION_MS + 1}ms`, '2147484s', '1e400'])
      expect(() => parseDuration(t, 'timeout'), t).to.throw(
        /^timeout: (.* is longer than svc can time|invalid duration)/,
      );
    expect(parseDuration(`${MAX_DURATION_MS}ms`, 't')).to.equal(MAX_DURATION_MS);
  });
});
