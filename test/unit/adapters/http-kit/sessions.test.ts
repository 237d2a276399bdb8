import { expect } from 'chai';
import type { IncomingMessage } from 'node:http';
import { BearerAuth } from '../../../../src/adapters/http-kit/auth.js';
import { BrowserSessions, sessionId } from '../../../../src/adapters/http-kit/sessions.js';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
const withId = (id: string) => req({ cookie: `theme=dark; svc_session=${id}; other=1` });

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

  it('reads only a well-formed id from the cookie header', () => {
    const id = 'A'.repeat(43);
    expect(sessionId(withId(id))).to.equal(id);
    expect(sessionId(req({ cookie: 'svc_session=short' }))).to.equal(undefined);
    expect(sessionId(req({ cookie: 'xsvc_session=' + id }))).to.equal(undefined);
    expect(sessionId(req({}))).to.equal(undefined);
  });

  it('writes an HttpOnly SameSite=Strict cookie with Max-Age, Secure behind TLS', () => {
    const s = new BrowserSessions(3_600_000);
    expect(s.cookie('x', false)).to.equal('svc_session=x; Path=/; HttpOnly; SameSite=Strict; Max-Age=3600');
    expect(s.cookie('x', true)).to.match(/; Secure$/);
    expect(BrowserSessions.clearCookie()).to.match(/Max-Age=0/);
  });

  it('stands for the token in BearerAuth, but a wrong bearer token is not rescued by a cookie', () => {
    const s = new BrowserSessions(60_000);
    const auth = new BearerAuth('tok', s);
    const id = s.open();
    expect(auth.check(withId(id))).to.equal(true);
    expect(auth.check(req({ authorization: 'Bearer tok' }))).to.equal(true);
    expect(auth.check(req({ authorization: 'Bearer nope', cookie: `svc_session=${id}` }))).to.equal(false);
    expect(auth.check(req({}))).to.equal(false);
    expect(auth.matches('tok')).to.equal(true);
    expect(new BearerAuth('', s).matches('')).to.equal(false);
  });
});
