import { expect } from 'chai';
import fc from 'fast-check';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { agentCursor, assertWatchId, isWatchId, parseCursor } from '../../../src/domain/watches.js';

describe('domain/watches', () => {
  it('names watch ids, and nothing else', () => {
    expect(isWatchId('w1')).to.equal(true);
    expect(assertWatchId('w12')).to.equal('w12');
    for (const s of ['p1', 'w0', 'w', 'w1a', '../w1', `w${'1'.repeat(17)}`])
      expect(() => assertWatchId(s), s).to.throw(InvalidArgumentError, /not a watch id/);
  });

  it('reads a cursor with or without its timeline, and refuses the rest', () => {
    expect(parseCursor('w3:1200')).to.deep.equal({ watch: 'w3', offset: 1200 });
    expect(parseCursor('w3:0@t1a2b')).to.deep.equal({ watch: 'w3', offset: 0, timeline: 't1a2b' });
    for (const s of ['p3:1', 'w3', 'w3:-1', 'w3:1@x1', 'w3:1@t', 'w3:1@tG', ' w3:1'])
      expect(() => parseCursor(s), s).to.throw(InvalidArgumentError, /cursor/);
  });

  it('takes from an agent only a cursor without a timeline (an agent knows none)', () => {
    expect(agentCursor('w3:1200')).to.deep.equal({ watch: 'w3', offset: 1200 });
    expect(agentCursor('w3:1200@t1')).to.equal(undefined);
    expect(agentCursor(42)).to.equal(undefined);
    expect(agentCursor(undefined)).to.equal(undefined);
  });

  it('reads back every cursor it could have written (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.option(fc.stringMatching(/^[0-9a-f]{1,24}$/), { nil: undefined }),
        (w, offset, t) => {
          const s = `w${w}:${offset}${t ? `@t${t}` : ''}`;
          expect(parseCursor(s)).to.deep.equal({ watch: `w${w}`, offset, ...(t ? { timeline: `t${t}` } : {}) });
          expect(agentCursor(s)).to.deep.equal(t ? undefined : { watch: `w${w}`, offset });
        },
      ),
    );
  });
});
