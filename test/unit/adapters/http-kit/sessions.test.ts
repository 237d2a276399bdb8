import { expect } from 'chai';
import type { IncomingMessage } from 'node:http';
import { BearerAuth } from '../../../../src/adapters/http-kit/auth.js';
import { BrowserSessions, dashboardProtocol, sessionId } from '../../../../src/adapters/http-kit/sessions.js';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
const withId = (id: string) => req({ 'x-svc-session': id });

describe('adapters/http-kit/BrowserSessions', () => {
  it('opens random sessions that expire after the ttl', () => {
    let now = 1_000;
    const s = new BrowserSessions(60_000, () => now);
    const a = s.open();
    const b = s.open();
    expect(a).to.match(/^[A-Za-z0-9_-]{43}$/);
    expect(a).to.not.equal(b);
    expect(s.valid(withId(a))).to.equal(true);
    now += 59_999;
    expect(s.valid(withId(a))).to.equal(true);
    now += 1;
    expect(s.valid(withId(a))).to.equal(false);
  });

  it('closes one session without touching another, and keeps at most max', () => {
    const s = new BrowserSessions(60_000, Date.now, 2);
    const a = s.open();
    const b = s.open();
    s.close(withId(a));
    expect(s.valid(withId(a))).to.equal(false);
    expect(s.valid(withId(b))).to.equal(true);
    const c = s.open();
    const d = s.open();
    expect(s.valid(withId(b)), 'oldest dropped').to.equal(false);
    expect(s.valid(withId(c)) && s.valid(withId(d))).to.equal(true);
  });

  it('reads only a well-formed id, from its header or a WebSocket subprotocol, never from a cookie', () => {
    const id = 'A'.repeat(43);
    expect(sessionId(withId(id))).to.equal(id);
    expect(sessionId(req({ 'x-svc-session': 'short' }))).to.equal(undefined);
    expect(sessionId(req({ cookie: `svc_session=${id}` })), 'a cookie is not a session').to.equal(undefined);
    expect(sessionId(req({ 'sec-websocket-protocol': `svc, svc-session.${id}` }))).to.equal(id);
    expect(sessionId(req({ 'sec-websocket-protocol': `svc, xsvc-session.${id}` }))).to.equal(undefined);
    expect(sessionId(req({}))).to.equal(undefined);
  });

  it("answers the dashboard's subprotocol, never the session's", () => {
    expect(dashboardProtocol(new Set(['svc', 'svc-session.' + 'A'.repeat(43)]))).to.equal('svc');
    expect(dashboardProtocol(new Set(['svc-session.' + 'A'.repeat(43)]))).to.equal(false);
  });

  it('stands for the token in BearerAuth, but a wrong bearer token is not rescued by a session', () => {
    const s = new BrowserSessions(60_000);
    const auth = new BearerAuth('tok', s);
    const id = s.open();
    expect(auth.check(withId(id))).to.equal(true);
    expect(auth.check(req({ authorization: 'Bearer tok' }))).to.equal(true);
    expect(auth.check(req({ authorization: 'Bearer nope', 'x-svc-session': id }))).to.equal(false);
    expect(auth.check(req({}))).to.equal(false);
    expect(auth.matches('tok')).to.equal(true);
    expect(new BearerAuth('', s).matches('')).to.equal(false);
  });
});
