import { expect } from 'chai';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { applyEgress, resumeEgress } from '../../../../src/adapters/agent/egress-trust.js';
import { tempDir } from '../../../helpers/daemon.js';

const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

describe('adapters/agent/egress-trust: the egress secrets in a guest (a scratch root)', () => {
  afterEach(() => {
    delete process.env.SVC_TEST_KEY;
    delete process.env.SSL_CERT_FILE;
    delete process.env.REQUESTS_CA_BUNDLE;
    delete process.env.CURL_CA_BUNDLE;
    delete process.env.NODE_EXTRA_CA_CERTS;
  });

  it('adds the CA to the bundle once, takes it out again, and sets and unsets the variables', () => {
    const root = tempDir();
    const state = join(root, 'var/lib/svc');
    mkdirSync(join(root, 'etc/ssl/certs'), { recursive: true });
    const bundle = join(root, 'etc/ssl/certs/ca-certificates.crt');
    writeFileSync(bundle, 'SYSTEM CAS\n');
    applyEgress({ ca_pem: CA, env: { SVC_TEST_KEY: 'svc-egress-1' } }, { stateDir: state, root, trustStore: true });
    applyEgress({ ca_pem: CA, env: { SVC_TEST_KEY: 'svc-egress-1' } }, { stateDir: state, root, trustStore: true });
    const text = readFileSync(bundle, 'utf8');
    expect(text.startsWith('SYSTEM CAS\n')).to.equal(true);
    expect(text.split('BEGIN CERTIFICATE').length - 1, 'once, however often applied').to.equal(1);
    expect(readFileSync(join(root, 'usr/local/share/ca-certificates/svc-egress.crt'), 'utf8')).to.equal(CA);
    expect(process.env.SVC_TEST_KEY).to.equal('svc-egress-1');
    expect(process.env.SSL_CERT_FILE).to.equal('/etc/ssl/certs/ca-certificates.crt');
    expect(JSON.parse(readFileSync(join(state, 'egress.json'), 'utf8')).env).to.deep.equal({
      SVC_TEST_KEY: 'svc-egress-1',
    });
    delete process.env.SVC_TEST_KEY;
    resumeEgress({ stateDir: state, root, trustStore: true });
    expect(process.env.SVC_TEST_KEY, 'a restarted agent sets them again').to.equal('svc-egress-1');
    applyEgress({ env: {} }, { stateDir: state, root, trustStore: true });
    expect(readFileSync(bundle, 'utf8')).to.equal('SYSTEM CAS\n');
    expect(existsSync(join(root, 'usr/local/share/ca-certificates/svc-egress.crt'))).to.equal(false);
    expect(process.env.SVC_TEST_KEY).to.equal(undefined);
    expect(process.env.SSL_CERT_FILE).to.equal(undefined);
  });

  it("a stand-in agent never touches a trust store: only its children's variables", () => {
    const root = tempDir();
    applyEgress({ ca_pem: CA, env: { SVC_TEST_KEY: 'p' } }, { stateDir: join(root, 's'), root, trustStore: false });
    expect(existsSync(join(root, 'etc'))).to.equal(false);
    expect(process.env.SVC_TEST_KEY).to.equal('p');
    expect(process.env.SSL_CERT_FILE).to.equal(undefined);
    applyEgress({ env: {} }, { stateDir: join(root, 's'), root, trustStore: false });
  });
});
