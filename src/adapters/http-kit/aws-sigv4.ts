import { createHash, createHmac } from 'node:crypto';

/** An AWS access key: what signs a call. */
export interface AwsKey {
  accessKeyId: string;
  secretAccessKey: string;
}

/** A call to sign: its URL's path and query are taken as they are (already encoded). */
export interface AwsCall {
  method: string;
  url: URL;
  /** Headers to send and sign besides `host` and `x-amz-date` (added here). */
  headers: Record<string, string>;
  body: string;
  service: string;
  region: string;
}

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const hmac = (key: Buffer | string, s: string) => createHmac('sha256', key).update(s, 'utf8').digest();

/** `YYYYMMDDTHHMMSSZ`, as `x-amz-date` takes it. */
export function amzDate(at: Date): string {
  return at
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

/** The key that signs a day's calls to one service in one region (kSigning). */
export function signingKey(secret: string, day: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secret}`, day), region), service), 'aws4_request');
}

/**
 * Signs `call` with AWS Signature Version 4 (header form) at `at`: answers the headers to send, the
 * call's own with `host`, `x-amz-date` and `authorization`. Every header given is signed; the
 * query is sorted by name as the canonical request wants it.
 */
export function signAws(call: AwsCall, key: AwsKey, at: Date): Record<string, string> {
  const date = amzDate(at);
  const day = date.slice(0, 8);
  const headers: Record<string, string> = { ...call.headers, host: call.url.host, 'x-amz-date': date };
  const names = [...new Set(Object.keys(headers).map((n) => n.toLowerCase()))].sort();
  const value = (n: string) =>
    Object.entries(headers)
      .filter(([k]) => k.toLowerCase() === n)
      .map(([, v]) => v.trim().replace(/\s+/g, ' '))
      .join(',');
  const query = call.url.search
    .slice(1)
    .split('&')
    .filter(Boolean)
    .map((p) => (p.includes('=') ? p : `${p}=`))
    .sort()
    .join('&');
  const canonical = [
    call.method.toUpperCase(),
    call.url.pathname || '/',
    query,
    ...names.map((n) => `${n}:${value(n)}`),
    '',
    names.join(';'),
    sha256(call.body),
  ].join('\n');
  const scope = `${day}/${call.region}/${call.service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', date, scope, sha256(canonical)].join('\n');
  const signature = createHmac('sha256', signingKey(key.secretAccessKey, day, call.region, call.service))
    .update(toSign, 'utf8')
    .digest('hex');
  return {
    ...headers,
    authorization: `AWS4-HMAC-SHA256 Credential=${key.accessKeyId}/${scope}, SignedHeaders=${names.join(';')}, Signature=${signature}`,
  };
}
