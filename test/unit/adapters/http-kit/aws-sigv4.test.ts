import { expect } from 'chai';
import { amzDate, signAws, signingKey } from '../../../../src/adapters/http-kit/aws-sigv4.js';

// The example key of AWS's Signature Version 4 documentation.
const KEY = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };

describe('AWS Signature Version 4', () => {
  it("derives the documentation's example signing key", () => {
    expect(signingKey(KEY.secretAccessKey, '20120215', 'us-east-1', 'iam').toString('hex')).to.equal(
      'f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d',
    );
  });

  it("signs the documentation's example call (IAM's ListUsers) as it does", () => {
    const headers = signAws(
      {
        method: 'GET',
        url: new URL('https://iam.amazonaws.com/?Version=2010-05-08&Action=ListUsers'),
        headers: { 'Content-Type': 'application/x-www-form-urlencoded; charset=utf-8' },
        body: '',
        service: 'iam',
        region: 'us-east-1',
      },
      KEY,
      new Date('2015-08-30T12:36:00Z'),
    );
    expect(headers['x-amz-date']).to.equal('20150830T123600Z');
    expect(headers.host).to.equal('iam.amazonaws.com');
    expect(headers.authorization).to.equal(
      'AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7',
    );
  });

  it('signs the body: another body, another signature', () => {
    const call = (body: string) =>
      signAws(
        {
          method: 'POST',
          url: new URL('https://api.ecr.eu-west-2.amazonaws.com/'),
          headers: {},
          body,
          service: 'ecr',
          region: 'eu-west-2',
        },
        KEY,
        new Date('2026-12-03T20:00:00Z'),
      ).authorization;
    expect(call('{}')).to.not.equal(call('{"registryIds":[]}'));
    expect(call('{}')).to.match(
      /Credential=AKIDEXAMPLE\/20261203\/eu-west-2\/ecr\/aws4_request, SignedHeaders=host;x-amz-date,/,
    );
    expect(amzDate(new Date('2026-01-02T03:04:05.678Z'))).to.equal('20260102T030405Z');
  });
});
