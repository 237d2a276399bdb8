import { expect } from 'chai';
import type { IncomingMessage } from 'node:http';
import type { SvcClient } from '../../../../src/adapters/client/svc-client.js';
import { defaultSandboxDomain, SandboxHosts } from '../../../../src/adapters/e2b/sandbox-hosts.js';
import type { Sandboxes } from '../../../../src/adapters/e2b/sandboxes.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';

const hosts = (domain: string) => new SandboxHosts({} as SvcClient, {} as Sandboxes, domain);
const req = (host: string) => ({ headers: { host } }) as IncomingMessage;

describe("adapters/e2b/SandboxHosts: E2B's sandbox URLs by Host", () => {
  it("owns `PORT-ID.DOMAIN` (any port on the listener, any case) and nothing else, so the daemon's API keeps its Hosts", () => {
    const h = hosts('localhost:7474');
    for (const yes of [
      '3000-e2b-0123456789ab.localhost:7474',
      '3000-E2B-0123456789AB.LOCALHOST',
      '1-e2b-0123456789ab.localhost:80',
    ])
      expect(h.owns(req(yes)), yes).to.equal(true);
    for (const no of [
      'localhost:7474',
      '127.0.0.1:7474',
      '3000-myvm.localhost:7474',
      '3000-e2b-0123456789ab.localhost.evil.com',
      '3000-e2b-0123456789ab.xlocalhost',
      'x.3000-e2b-0123456789ab.localhost',
      '3000-e2b-0123456789abc.localhost',
      '123456-e2b-0123456789ab.localhost',
      '',
    ])
      expect(h.owns(req(no)), no).to.equal(false);
    expect(hosts('sbx.example.com').owns(req('8080-e2b-0123456789ab.sbx.example.com'))).to.equal(true);
    expect(hosts('sbx.example.com').owns(req('8080-e2b-0123456789ab.sbxXexample.com'))).to.equal(false);
  });

  it('refuses a domain that is not a host name, and tells the port of the listener by default', () => {
    for (const bad of ['http://x', 'a b', '-x.com', 'x.com:port', 'x/y'])
      expect(() => hosts(bad), bad).to.throw(InvalidArgumentError, /e2b_domain/);
    expect(defaultSandboxDomain(7474)).to.equal('localhost:7474');
    expect(defaultSandboxDomain(80)).to.equal('localhost');
    expect(defaultSandboxDomain(undefined)).to.equal('localhost');
  });
});
