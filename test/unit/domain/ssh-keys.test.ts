import { expect } from 'chai';
import ssh2 from 'ssh2';
import { generateEd25519 } from '../../../src/adapters/ssh/keygen.js';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { hostKeyOfWire, parseSshPublicKey, sshKeyLine } from '../../../src/domain/ssh-keys.js';

describe('domain/ssh-keys: a public key as one line of a .pub file', () => {
  const ed = generateEd25519('me@laptop').public.trim();
  const rsa = ssh2.utils.generateKeyPairSync('rsa', { bits: 2048, comment: 'old key' }).public.trim();
  const ecdsa = ssh2.utils.generateKeyPairSync('ecdsa', { bits: 256 }).public.trim();

  it('takes ed25519, RSA and ECDSA keys with or without a comment, and writes them back as given', () => {
    const k = parseSshPublicKey(ed);
    expect(k.type).to.equal('ssh-ed25519');
    expect(k.comment).to.equal('me@laptop');
    expect(sshKeyLine(k)).to.equal(ed);
    expect(sshKeyLine(k, false)).to.equal(ed.split(' ').slice(0, 2).join(' '));
    expect(parseSshPublicKey(rsa)).to.include({ type: 'ssh-rsa', comment: 'old key' });
    expect(parseSshPublicKey(`  ${ecdsa.split(' ').slice(0, 2).join(' ')}\n`)).to.deep.equal({
      type: 'ecdsa-sha2-nistp256',
      data: ecdsa.split(' ')[1],
    });
  });

  it('refuses options in front, more than one line, a type its data does not have, and what is not a key', () => {
    const [type, data] = ed.split(' ');
    const rsaData = rsa.split(' ')[1];
    const bad: [unknown, RegExp][] = [
      [undefined, /public_key is required/],
      ['', /public_key is required/],
      [42, /public_key is required/],
      [`command="rm -rf /" ${ed}`, /must start with its type .* without options/],
      [`from="10.0.0.1" ${ed}`, /must start with its type/],
      [`${ed}\n${ed}`, /one line/],
      [`ssh-dss ${data}`, /must start with its type/],
      [`${type}`, /not base64/],
      [`${type} not-base64!`, /not base64/],
      [`${type} ${data.slice(0, -1)}`, /not base64/],
      [`${type} ${rsaData}`, /not a ssh-ed25519 key/],
      [`ssh-rsa ${data}`, /not a ssh-rsa key/],
      [`${type} AAAA`, /not a ssh-ed25519 key/],
      [`${type} ${data} ${'c'.repeat(300)}`, /comment must be printable, 256/],
      [`${type} ${data} a\u0007b`, /comment must be printable/],
      [`${type} ${'A'.repeat(9000)}`, /longer than 8192/],
    ];
    for (const [line, re] of bad) {
      expect(() => parseSshPublicKey(line), String(line).slice(0, 60)).to.throw(InvalidArgumentError, re);
    }
  });

  it('reads a host key from its wire encoding, as a known_hosts key', () => {
    const data = ed.split(' ')[1];
    expect(sshKeyLine(hostKeyOfWire(Buffer.from(data, 'base64')))).to.equal(`ssh-ed25519 ${data}`);
    for (const wire of [Buffer.alloc(0), Buffer.from([0, 0, 0, 200, 1, 2]), Buffer.from('\0\0\0\x07ssh-dssAAAA')])
      expect(() => hostKeyOfWire(wire)).to.throw(InvalidArgumentError, /unknown type/);
  });
});
