import { InvalidArgumentError, errorMessage } from '../../domain/errors.js';
import { signAws } from '../http-kit/aws-sigv4.js';

/** A registry's login as skopeo takes it. */
export interface RegistryLogin {
  username: string;
  password: string;
}

/** How long ECR may take to hand out a token, and what its answer may weigh. */
const ECR_TIMEOUT_MS = 30_000;
const ECR_MAX_BYTES = 1 << 20;
const REGION = /^[a-z]{2}(-[a-z]+)+-\d{1,2}$/;
const KEY_ID = /^[A-Z0-9]{16,128}$/;

/**
 * The login of the SDK's `fromImageRegistry` for a build's base, by its type:
 * - `registry` (`fromImage(ref, {username, password})`): as it is;
 * - `gcp` (`fromGCPRegistry`): the service account's key as Google's registries take it,
 *   user `_json_key`;
 * - `aws` (`fromAWSRegistry`): a token asked of ECR's GetAuthorizationToken in the key's region,
 *   signed with the key (Signature Version 4), user `AWS`. ECR is reached at
 *   `https://api.ecr.REGION.amazonaws.com`, or where `AWS_ENDPOINT_URL_ECR` (then
 *   `AWS_ENDPOINT_URL`) says, as AWS's own tools do.
 * InvalidArgumentError for a login that is not one, or one ECR refuses (with its words).
 */
export async function registryLogin(v: unknown, env = process.env): Promise<RegistryLogin | undefined> {
  if (v === undefined || v === null) return undefined;
  const r = v as Record<string, unknown>;
  const strings = (...keys: string[]) => keys.every((k) => typeof r[k] === 'string' && r[k] !== '');
  switch (r.type) {
    case 'registry':
      if (!strings('username', 'password'))
        throw new InvalidArgumentError('fromImageRegistry needs a username and a password');
      return { username: r.username as string, password: r.password as string };
    case 'gcp':
      return { username: '_json_key', password: serviceAccount(r.serviceAccountJson) };
    case 'aws': {
      if (!strings('awsAccessKeyId', 'awsSecretAccessKey', 'awsRegion'))
        throw new InvalidArgumentError('fromAWSRegistry needs an accessKeyId, a secretAccessKey and a region');
      const region = r.awsRegion as string;
      if (!REGION.test(region))
        throw new InvalidArgumentError(`fromAWSRegistry: ${JSON.stringify(region)} is not a region`);
      if (!KEY_ID.test(r.awsAccessKeyId as string))
        throw new InvalidArgumentError('fromAWSRegistry: the accessKeyId is not an access key id');
      const endpoint = env.AWS_ENDPOINT_URL_ECR ?? env.AWS_ENDPOINT_URL ?? `https://api.ecr.${region}.amazonaws.com`;
      return ecrLogin(new URL(endpoint), region, {
        accessKeyId: r.awsAccessKeyId as string,
        secretAccessKey: r.awsSecretAccessKey as string,
      });
    }
    default:
      throw new InvalidArgumentError(
        `fromImageRegistry of type ${JSON.stringify(r.type)}: svc knows registry, aws and gcp logins`,
      );
  }
}

/** A Google service account's key (JSON), checked to be one: `_json_key`'s password. */
function serviceAccount(v: unknown): string {
  let key: unknown;
  try {
    key = typeof v === 'string' ? JSON.parse(v) : undefined;
  } catch {
    // said below
  }
  const k = key as Record<string, unknown> | undefined;
  if (typeof k !== 'object' || k === null || typeof k.client_email !== 'string' || typeof k.private_key !== 'string')
    throw new InvalidArgumentError(
      "fromGCPRegistry needs a service account's key (JSON with client_email and private_key)",
    );
  return v as string;
}

/** ECR's GetAuthorizationToken at `endpoint`: its token, `AWS:<password>`, as a login. */
async function ecrLogin(
  endpoint: URL,
  region: string,
  key: { accessKeyId: string; secretAccessKey: string },
): Promise<RegistryLogin> {
  const body = '{}';
  const headers = signAws(
    {
      method: 'POST',
      url: endpoint,
      headers: {
        'content-type': 'application/x-amz-json-1.1',
        'x-amz-target': 'AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken',
      },
      body,
      service: 'ecr',
      region,
    },
    key,
    new Date(),
  );
  delete headers.host; // fetch sets it, from the URL it was signed with
  let status: number;
  let text: string;
  try {
    const res = await fetch(endpoint, {
      method: 'POST',
      headers,
      body,
      redirect: 'error',
      signal: AbortSignal.timeout(ECR_TIMEOUT_MS),
    });
    status = res.status;
    text = await bounded(res, ECR_MAX_BYTES);
  } catch (err) {
    throw new InvalidArgumentError(`fromAWSRegistry: ECR at ${endpoint.origin} did not answer: ${errorMessage(err)}`);
  }
  let answer: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(text) as unknown;
    // an answer that is JSON but no object (null, a number, a list) is no token either
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      answer = parsed as Record<string, unknown>;
  } catch {
    // said below
  }
  if (status !== 200) {
    const type = String(answer.__type ?? `HTTP ${status}`).replace(/^.*#/, '');
    const message = String(answer.message ?? answer.Message ?? text.slice(0, 200));
    throw new InvalidArgumentError(`fromAWSRegistry: ECR refused the login: ${type}: ${message}`);
  }
  const data = (answer.authorizationData as { authorizationToken?: unknown }[] | undefined)?.[0];
  const token =
    typeof data?.authorizationToken === 'string' ? Buffer.from(data.authorizationToken, 'base64').toString('utf8') : '';
  const colon = token.indexOf(':');
  if (colon < 1) throw new InvalidArgumentError('fromAWSRegistry: ECR answered no authorization token');
  return { username: token.slice(0, colon), password: token.slice(colon + 1) };
}

/** A fetch answer's body as text, refused past `max` bytes. */
async function bounded(res: Response, max: number): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  const reader = res.body?.getReader();
  for (let r = await reader?.read(); r && !r.done; r = await reader!.read()) {
    n += r.value.length;
    if (n > max) {
      await reader!.cancel();
      throw new Error(`an answer over ${max} bytes`);
    }
    chunks.push(Buffer.from(r.value));
  }
  return Buffer.concat(chunks).toString('utf8');
}
