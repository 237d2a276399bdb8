import { expect } from 'chai';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { registryLogin } from '../../../../src/adapters/e2b/registry-logins.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';

const AWS = { type: 'aws', awsAccessKeyId: 'AKIAEXAMPLE0000001', awsSecretAccessKey: 'secret', awsRegion: 'eu-west-2' };

describe('E2B registry logins (fromImage, fromGCPRegistry, fromAWSRegistry)', () => {
  let server: Server;
  let endpoint: string;
  let answer: (res: ServerResponse) => void = (res) => res.end();
  before(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => answer(res));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  const refusal = async (v: unknown, env: NodeJS.ProcessEnv = { AWS_ENDPOINT_URL_ECR: endpoint }) => {
    const err = await registryLogin(v, env).catch((e: unknown) => e);
    expect(err, String(err)).to.be.instanceOf(InvalidArgumentError);
    return (err as Error).message;
  };

  it("takes a user and password as they are, and a Google service account's key as _json_key", async () => {
    expect(await registryLogin(undefined)).to.equal(undefined);
    expect(await registryLogin({ type: 'registry', username: 'u', password: 'p' })).to.deep.equal({
      username: 'u',
      password: 'p',
    });
    const key = JSON.stringify({ type: 'service_account', client_email: 'a@b', private_key: 'k' });
    expect(await registryLogin({ type: 'gcp', serviceAccountJson: key })).to.deep.equal({
      username: '_json_key',
      password: key,
    });
    expect(await refusal({ type: 'registry', username: 'u' })).to.match(/needs a username and a password/);
    for (const bad of ['{', '{"client_email":"a@b"}', '[]', undefined])
      expect(await refusal({ type: 'gcp', serviceAccountJson: bad }), String(bad)).to.match(/service account's key/);
    expect(await refusal({ type: 'azure' })).to.match(/svc knows registry, aws and gcp logins/);
  });

  it("turns ECR's token into a login, AWS_ENDPOINT_URL standing in when AWS_ENDPOINT_URL_ECR is not set", async () => {
    answer = (res) =>
      res.end(
        JSON.stringify({
          authorizationData: [{ authorizationToken: Buffer.from('AWS:pw:with:colons').toString('base64') }],
        }),
      );
    expect(await registryLogin(AWS, { AWS_ENDPOINT_URL: endpoint })).to.deep.equal({
      username: 'AWS',
      password: 'pw:with:colons',
    });
  });

  it('refuses what ECR refuses with its words, and what it answers that is not a token, a bounded answer, or no answer', async () => {
    answer = (res) =>
      res
        .writeHead(400)
        .end(JSON.stringify({ __type: 'com.amazon.coral.service#UnrecognizedClientException', message: 'bad key' }));
    expect(await refusal(AWS)).to.equal('fromAWSRegistry: ECR refused the login: UnrecognizedClientException: bad key');
    answer = (res) => res.writeHead(503).end('<html>down</html>');
    expect(await refusal(AWS)).to.equal('fromAWSRegistry: ECR refused the login: HTTP 503: <html>down</html>');
    for (const body of ['{}', '{"authorizationData":[{"authorizationToken":"bm9jb2xvbg=="}]}', 'not json', 'null']) {
      answer = (res) => res.end(body);
      expect(await refusal(AWS), body).to.equal('fromAWSRegistry: ECR answered no authorization token');
    }
    answer = (res) => {
      res.write(Buffer.alloc(1 << 20, 32));
      res.end(Buffer.alloc(1024, 32));
    };
    expect(await refusal(AWS)).to.match(/did not answer: an answer over 1048576 bytes/);
    expect(await refusal(AWS, { AWS_ENDPOINT_URL_ECR: 'http://127.0.0.1:1' })).to.match(
      /^fromAWSRegistry: ECR at http:\/\/127\.0\.0\.1:1 did not answer: /,
    );
  });

  it('checks the region and key id before any call', async () => {
    expect(await refusal({ ...AWS, awsRegion: 'eu-west-2.evil.example' })).to.match(/is not a region/);
    expect(await refusal({ ...AWS, awsAccessKeyId: 'a b' })).to.match(/not an access key id/);
    expect(await refusal({ ...AWS, awsSecretAccessKey: '' })).to.match(
      /needs an accessKeyId, a secretAccessKey and a region/,
    );
  });
});
