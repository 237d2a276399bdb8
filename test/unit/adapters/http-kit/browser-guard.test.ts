import { expect } from 'chai';
import type { IncomingMessage } from 'node:http';
import { browserGuard, hostName } from '../../../../src/adapters/http-kit/browser-guard.js';

const req = (method: string, headers: Record<string, string>) => ({ method, headers }) as unknown as IncomingMessage;

describe('adapters/http-kit/browser-guard', () => {
  it('reads host names from Host values, brackets and ports aside', () => {
    expect(hostName('LocalHost:7474')).to.equal('localhost');
    expect(hostName('[::1]:7474')).to.equal('::1');
    expect(hostName('127.0.0.1')).to.equal('127.0.0.1');
    expect(hostName('svc.lan.')).to.equal('svc.lan');
    for (const bad of ['', 'a b', 'user@host', 'h/x', '[zz]:1', 'h:99999999'])
      expect(hostName(bad), bad).to.equal(undefined);
  });

  it('serves the bind address, loopback names and allowed hosts; a wildcard bind adds none', () => {
    const g = browserGuard({ bindHost: '10.0.0.5', allowedHosts: ['svc.lan'], allowedOrigins: [] });
    for (const host of ['10.0.0.5:7474', 'localhost', '127.0.0.1:1', '[::1]:7474', 'SVC.lan:7474'])
      expect(g(req('GET', { host })), host).to.equal(undefined);
    for (const host of ['evil.example', '10.0.0.6:7474', '0.0.0.0:7474'])
      expect(g(req('GET', { host })), host).to.be.a('string');
    expect(
      browserGuard({ bindHost: '0.0.0.0', allowedHosts: [], allowedOrigins: [] })(req('GET', { host: '0.0.0.0:7474' })),
    ).to.be.a('string');
    expect(
      browserGuard({ bindHost: '', allowedHosts: [], allowedOrigins: [], anyIpHost: true })(
        req('GET', { host: '10.1.2.3:7475' }),
      ),
    ).to.equal(undefined);
  });

  it('lets changes through only from its own origin, allowed ones, or clients that send none', () => {
    const g = browserGuard({ bindHost: '127.0.0.1', allowedHosts: [], allowedOrigins: ['https://ui.example'] });
    const host = '127.0.0.1:7474';
    expect(g(req('POST', { host }))).to.equal(undefined);
    expect(g(req('POST', { host, origin: 'http://127.0.0.1:7474' }))).to.equal(undefined);
    expect(g(req('DELETE', { host, origin: 'https://UI.example' }))).to.equal(undefined);
    expect(g(req('GET', { host, origin: 'http://evil.example' }))).to.equal(undefined);
    for (const origin of [
      'http://evil.example',
      'null',
      'http://127.0.0.1:7475',
      'http://localhost:7474',
      'file://',
      'garbage',
    ]) {
      expect(g(req('POST', { host, origin })), origin).to.match(/may not change anything/);
    }
    expect(g(req('GET', { host, origin: 'http://evil.example', upgrade: 'websocket' }))).to.match(
      /may not open a WebSocket/,
    );
    expect(g(req('PUT', { host, 'sec-fetch-site': 'cross-site' }))).to.match(/cross-site/);
    expect(g(req('PUT', { host, 'sec-fetch-site': 'same-origin' }))).to.equal(undefined);
  });
});
