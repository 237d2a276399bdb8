import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { createSecureContext, type SecureContext } from 'node:tls';
import * as x509 from '@peculiar/x509';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY = 86_400_000;
/** A VM's CA lives ten years (it is the VM's, and goes with it); a leaf for a host, thirty days. */
const CA_DAYS = 3650;
const LEAF_DAYS = 30;
/** Leaves kept per VM (one a listed host). */
const LEAF_CACHE = 64;

const pem = (label: string, der: ArrayBuffer) =>
  `-----BEGIN ${label}-----\n${Buffer.from(der)
    .toString('base64')
    .replace(/.{64}/g, '$&\n')
    .replace(/\n?$/, '\n')}-----END ${label}-----\n`;

const der = (text: string, label: string): Buffer => {
  const m = new RegExp(`-----BEGIN ${label}-----([^-]+)-----END ${label}-----`).exec(text);
  if (!m) throw new Error(`no ${label} in the VM's CA file`);
  return Buffer.from(m[1].replace(/\s+/g, ''), 'base64');
};

/** The files of a VM's CA: `<prefix>.crt` (the certificate, for the guest) and `<prefix>.key` (0600, never leaves the host). */
export const caFiles = (prefix: string) => ({ cert: `${prefix}.crt`, key: `${prefix}.key` });

/**
 * Makes a VM's CA at `prefix` unless it is there: an ECDSA P-256 key and a self-signed
 * certificate that may sign server certificates only (path length 0). Answers the certificate.
 */
export async function ensureEgressCa(prefix: string, vm: string): Promise<string> {
  const files = caFiles(prefix);
  const had = await readFile(files.cert, 'utf8').catch(() => undefined);
  if (had && (await readFile(files.key, 'utf8').catch(() => undefined))) return had;
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: `CN=svc egress CA for ${vm.replace(/[,=+<>#;"\\]/g, '_')}, O=svc`,
    notBefore: new Date(Date.now() - DAY),
    notAfter: new Date(Date.now() + CA_DAYS * DAY),
    signingAlgorithm: ALG,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const keyPem = pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  await writeFileAtomic(files.key, keyPem, { mode: 0o600 });
  const certPem = cert.toString('pem') + '\n';
  await writeFileAtomic(files.cert, certPem, { mode: 0o644 });
  return certPem;
}

const randomSerial = () => {
  const b = webcrypto.getRandomValues(new Uint8Array(16));
  b[0] &= 0x7f; // positive
  return Buffer.from(b).toString('hex');
};

/**
 * Server certificates for the hosts a VM's egress secrets name, signed by the VM's CA and made on
 * first use (a key each, kept in memory only). The guest trusts the CA, so its TLS clients accept
 * the egress path as the host they asked for; nothing else does.
 */
export class EgressCa {
  private signer: Promise<{ key: CryptoKey; cert: x509.X509Certificate; pem: string }> | undefined;
  private readonly leaves = new Map<string, Promise<SecureContext>>();

  constructor(
    private readonly prefix: string,
    private readonly vm: string,
  ) {}

  /** The CA moved with its VM (a rename): leaves made so far stay good. */
  moveTo(prefix: string): EgressCa {
    const next = new EgressCa(prefix, this.vm);
    next.signer = this.signer;
    for (const [k, v] of this.leaves) next.leaves.set(k, v);
    return next;
  }

  /** A TLS context that presents a certificate for `host` (a DNS name or an IP address). */
  contextFor(host: string): Promise<SecureContext> {
    const key = host.toLowerCase();
    let ctx = this.leaves.get(key);
    if (!ctx) {
      if (this.leaves.size >= LEAF_CACHE) this.leaves.delete(this.leaves.keys().next().value as string);
      ctx = this.mint(host.toLowerCase());
      ctx.catch(() => this.leaves.delete(key));
      this.leaves.set(key, ctx);
    }
    return ctx;
  }

  private load() {
    this.signer ??= (async () => {
      await ensureEgressCa(this.prefix, this.vm);
      const files = caFiles(this.prefix);
      const [certPem, keyPem] = await Promise.all([readFile(files.cert, 'utf8'), readFile(files.key, 'utf8')]);
      const key = await webcrypto.subtle.importKey('pkcs8', der(keyPem, 'PRIVATE KEY'), ALG, false, ['sign']);
      return { key, cert: new x509.X509Certificate(certPem), pem: certPem };
    })();
    this.signer.catch(() => (this.signer = undefined));
    return this.signer;
  }

  private async mint(host: string): Promise<SecureContext> {
    const ca = await this.load();
    const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: randomSerial(),
      subject: `CN=${host}`,
      issuer: ca.cert.subject,
      notBefore: new Date(Date.now() - DAY),
      notAfter: new Date(Date.now() + LEAF_DAYS * DAY),
      signingAlgorithm: ALG,
      publicKey: keys.publicKey,
      signingKey: ca.key,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([{ type: isIP(host) ? 'ip' : 'dns', value: host }]),
        await x509.AuthorityKeyIdentifierExtension.create(ca.cert.publicKey),
      ],
    });
    const keyPem = pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
    return createSecureContext({ key: keyPem, cert: cert.toString('pem') + '\n' + ca.pem });
  }
}
