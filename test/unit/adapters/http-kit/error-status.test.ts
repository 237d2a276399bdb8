import { expect } from 'chai';
import { ALL_DOMAIN_ERRORS } from '../../../../src/domain/errors.js';
import { STATUS_BY_CODE, toHttpError } from '../../../../src/adapters/http-kit/error-status.js';

describe('adapters/http/error-status', () => {
  it('maps every domain error to a status', () => {
    for (const E of ALL_DOMAIN_ERRORS) {
      const e = new E('boom');
      const { status, body } = toHttpError(e);
      expect(status, E.name).to.be.within(400, 599);
      expect(body).to.deep.equal({ error: 'boom', code: e.code });
    }
    expect(Object.keys(STATUS_BY_CODE)).to.have.length(ALL_DOMAIN_ERRORS.length);
  });

  it('maps the codes the spec names', () => {
    expect(STATUS_BY_CODE.invalid_argument).to.equal(400);
    expect(STATUS_BY_CODE.invalid_state).to.equal(400);
    expect(STATUS_BY_CODE.not_found).to.equal(404);
    expect(STATUS_BY_CODE.already_exists).to.equal(409);
    expect(STATUS_BY_CODE.permission_denied).to.equal(403);
    expect(STATUS_BY_CODE.resource_exhausted).to.equal(429);
    expect(STATUS_BY_CODE.agent_unavailable).to.equal(503);
    expect(STATUS_BY_CODE.agent_failure).to.equal(502);
    expect(STATUS_BY_CODE.deadline_exceeded).to.equal(504);
  });

  it('says a full disk is one (507) wherever it was not put in words before', () => {
    const full = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    expect(toHttpError(full)).to.deep.equal({
      status: 507,
      body: { error: 'no space left: ENOSPC: no space left on device, write', code: 'insufficient_storage' },
    });
    expect(toHttpError(Object.assign(new Error('quota'), { code: 'EDQUOT' })).status).to.equal(507);
    expect(toHttpError(Object.assign(new Error('io'), { code: 'EIO' })).status).to.equal(500);
  });

  it('treats unknown errors as 500', () => {
    expect(toHttpError(new Error('x')).status).to.equal(500);
    expect(toHttpError('x').status).to.equal(500);
  });
});
