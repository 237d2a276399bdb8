import { expect } from 'chai';
import { apiUrl } from '../../../../src/adapters/client/svc-client.js';

describe('adapters/client: the --api URL', () => {
  it('takes a URL, or host:port as the daemon writes its api key, and refuses anything else naming the flag', () => {
    expect(apiUrl('http://127.0.0.1:7474').origin).to.equal('http://127.0.0.1:7474');
    expect(apiUrl('https://svc.example:8443/').origin).to.equal('https://svc.example:8443');
    expect(apiUrl('127.0.0.1:7474').origin).to.equal('http://127.0.0.1:7474');
    expect(apiUrl('[::1]:7474').origin).to.equal('http://[::1]:7474');
    for (const bad of ['ftp://host:21', 'http://', 'exa mple:1'])
      expect(() => apiUrl(bad), bad).to.throw(/^--api ".*": not the daemon's URL, such as http:\/\/127\.0\.0\.1:7474$/);
  });
});
