import { expect } from 'chai';
import { envelope, RpcError, toRpcError } from '../../../../src/adapters/e2b/connect-rpc.js';
import { metaOf, tagsFor, timeoutSeconds } from '../../../../src/adapters/e2b/sandboxes.js';
import { InvalidStateError, NotFoundError, NotSupportedError } from '../../../../src/domain/errors.js';
import { SvcError } from '../../../../src/adapters/client/svc-client.js';
import type { Instance } from '../../../../src/domain/vm.js';

describe('adapters/e2b', () => {
  it('frames a Connect stream message: flags, big-endian length, JSON', () => {
    const b = envelope(0x02, { error: { code: 'not_found' } });
    expect(b[0]).to.equal(2);
    expect(b.readUInt32BE(1)).to.equal(b.length - 5);
    expect(JSON.parse(b.subarray(5).toString())).to.deep.equal({ error: { code: 'not_found' } });
  });

  it("maps svc's errors, and the daemon's answers, onto Connect's codes", () => {
    expect(toRpcError(new NotFoundError('x')).code).to.equal('not_found');
    expect(toRpcError(new InvalidStateError('x')).code).to.equal('failed_precondition');
    expect(toRpcError(new NotSupportedError('x')).code).to.equal('unimplemented');
    expect(toRpcError(new SvcError(404, 'no such vm')).code).to.equal('not_found');
    expect(toRpcError(new SvcError(0, 'unreachable')).code).to.equal('unavailable');
    expect(toRpcError(new RpcError('unauthenticated', 'x')).code).to.equal('unauthenticated');
    expect(toRpcError(new Error('boom'))).to.include({ code: 'internal', message: 'boom' });
  });

  it("keeps a sandbox's E2B fields in its VM's tags and reads them back", () => {
    const endAt = new Date('2026-11-26T12:00:00.000Z');
    const meta = { template: 'tpl', endAt, onTimeout: 'pause' as const, metadata: { a: '1' }, envs: { K_1: 'v' } };
    const tags = tagsFor(meta);
    expect(tags).to.include({ e2b: '1', 'e2b/template': 'tpl', 'e2b/m/a': '1', 'e2b/env/K_1': 'v' });
    expect(metaOf({ tags } as unknown as Instance)).to.deep.equal({
      ...meta,
      privateTraffic: false,
      autoResume: false,
    });
    // A sandbox made from a built template starts its commands in the template's WORKDIR.
    const fromTpl = tagsFor({ ...meta, workdir: '/srv/app' });
    expect(fromTpl).to.include({ 'e2b/workdir': '/srv/app' });
    expect(metaOf({ tags: fromTpl } as unknown as Instance).workdir).to.equal('/srv/app');
    // A sandbox whose ports take only its traffic token says so in a tag of its own.
    const closed = tagsFor({ ...meta, privateTraffic: true });
    expect(closed).to.include({ 'e2b/private_traffic': '1' });
    expect(metaOf({ tags: closed } as unknown as Instance)).to.deep.equal({
      ...meta,
      privateTraffic: true,
      autoResume: false,
    });
    // So does one that wakes for its next call (lifecycle.autoResume).
    const waking = tagsFor({ ...meta, autoResume: true });
    expect(waking).to.include({ 'e2b/auto_resume': '1' });
    expect(metaOf({ tags: waking } as unknown as Instance)).to.include({ autoResume: true, onTimeout: 'pause' });
  });

  it('refuses metadata keys, variable names and timeouts it cannot keep, saying which', () => {
    const base = { template: 'base', endAt: new Date(), onTimeout: 'kill' as const, metadata: {}, envs: {} };
    expect(() => tagsFor({ ...base, metadata: { 'a b': '1' } })).to.throw(/metadata key "a b"/);
    expect(() => tagsFor({ ...base, envs: { '1X': 'v' } })).to.throw(/"1X" is not a variable name/);
    expect(timeoutSeconds(undefined)).to.equal(300);
    expect(timeoutSeconds(10)).to.equal(10);
    expect(() => timeoutSeconds(86_401)).to.throw(/0 to 86400/);
    expect(() => timeoutSeconds(1.5)).to.throw(/whole seconds/);
  });
});
