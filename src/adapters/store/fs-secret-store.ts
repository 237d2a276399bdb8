import { createCipheriv, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { inject, injectable } from 'inversify';
import { InternalError, NotFoundError } from '../../domain/errors.js';
import type { SecretRecord } from '../../domain/events.js';
import { SECRET_NAME_RE } from '../../domain/names.js';
import type { Config } from '../../app/config.js';
import { AppConfig } from '../../app/tokens.js';
import { Clock } from '../../ports/clock.js';
import type { SecretStore } from '../../ports/stores.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { openSealed, secretFile, secretKeyFile, type StoredSecret } from '../fs-kit/sealed-secret.js';

/** What the key's check value is an HMAC of. */
const CHECK_LABEL = 'svc secret.key check v1';

/**
 * Secrets in `<data_dir>/secrets/<name>.json`, each value sealed with AES-256-GCM under a key in
 * `<data_dir>/secret.key` (0600, made on first use). The name is bound in as associated data, so
 * a sealed value copied to another name does not decrypt. Beside the key, `secret.key.check`
 * holds an HMAC of a fixed label under it: a different key of the right size (a file restored
 * from the wrong backup) is caught at start, not by the first secret that fails to open.
 */
@injectable()
export class FsSecretStore implements SecretStore {
  private readonly dataDir: string;
  private readonly dir: string;
  private readonly keyPath: string;
  private readonly checkPath: string;
  private key: Promise<Buffer> | undefined;

  constructor(
    @inject(AppConfig) config: Config,
    @inject(Clock) private readonly clock: Clock,
  ) {
    this.dataDir = config.data_dir;
    this.dir = join(config.data_dir, 'secrets');
    this.keyPath = secretKeyFile(config.data_dir);
    this.checkPath = join(config.data_dir, 'secret.key.check');
  }

  /**
   * The key, made on first use in a fresh data dir. A key that cannot be read or is not 32 bytes,
   * or a missing key while secrets are stored, is an error naming the file: it is never replaced,
   * because every stored secret would be lost without a word.
   */
  private getKey(): Promise<Buffer> {
    this.key ??= (async () => {
      const broken = (why: string) =>
        new InternalError(
          `${this.keyPath} ${why}; svcd will not replace it, since every stored secret would be lost. Restore it from a backup, or move ${this.dir} and the key away to start without secrets`,
        );
      let k: Buffer;
      try {
        k = await readFile(this.keyPath);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT') throw broken(`cannot be read (${code ?? (err as Error).message})`);
        const stored = (await readdir(this.dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'));
        if (stored.length) throw broken(`is missing but ${stored.length} secret(s) are stored in ${this.dir}`);
        k = randomBytes(32);
        await writeFileAtomic(this.keyPath, k, 0o600);
        await writeFileAtomic(this.checkPath, checkValue(k), 0o600);
        return k;
      }
      if (k.length !== 32) throw broken(`is damaged (${k.length} bytes, not 32)`);
      await this.checkKey(k, broken);
      return k;
    })();
    this.key.catch(() => {
      this.key = undefined;
    });
    return this.key;
  }

  /**
   * Compares the key with its check value. A key from before the check value gets one if it opens
   * a stored secret (or there are none); one that opens none is not the key they were sealed with.
   */
  private async checkKey(k: Buffer, broken: (why: string) => Error): Promise<void> {
    const want = await readFile(this.checkPath, 'utf8').catch(() => undefined);
    if (want !== undefined) {
      const got = Buffer.from(checkValue(k));
      const saved = Buffer.from(want.trim());
      if (saved.length !== got.length || !timingSafeEqual(saved, got))
        throw broken(
          `is not the key the stored secrets were sealed with (its check value in ${this.checkPath} differs)`,
        );
      return;
    }
    const stored = (await readdir(this.dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'));
    if (stored.length) {
      const name = stored[0].replace(/\.json$/, '');
      const opens = await this.read(name)
        .then((s) => (openSealed(k, name, s), true))
        .catch(() => false);
      if (!opens) throw broken(`does not open the stored secret ${name}: it is not the key they were sealed with`);
    }
    await writeFileAtomic(this.checkPath, checkValue(k), 0o600);
  }

  /** Checks the key at start: the daemon stops with the reason rather than run without its secrets. */
  async verify(): Promise<void> {
    const stored = (await readdir(this.dir).catch(() => [] as string[])).some((f) => f.endsWith('.json'));
    const exists = await readFile(this.keyPath).then(
      () => true,
      (e: NodeJS.ErrnoException) => e.code !== 'ENOENT',
    );
    if (stored || exists) await this.getKey();
  }

  async list(): Promise<SecretRecord[]> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const out: SecretRecord[] = [];
    for (const f of (await readdir(this.dir)).sort()) {
      const name = f.replace(/\.json$/, '');
      if (!f.endsWith('.json') || !SECRET_NAME_RE.test(name)) continue;
      const s = await this.read(name).catch(() => undefined);
      if (s) out.push(publicRecord(s));
    }
    return out;
  }

  async put(name: string, value: Buffer, mode: string): Promise<SecretRecord> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const key = await this.getKey();
    const now = new Date(this.clock.now()).toISOString();
    const prev = await this.read(name).catch(() => undefined);
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    cipher.setAAD(Buffer.from(name));
    const ciphertext = Buffer.concat([cipher.update(value), cipher.final()]);
    const stored: StoredSecret = {
      name,
      size: value.length,
      mode,
      created_at: prev?.created_at ?? now,
      updated_at: now,
      iv: iv.toString('base64'),
      tag: cipher.getAuthTag().toString('base64'),
      ciphertext: ciphertext.toString('base64'),
    };
    await writeFileAtomic(this.file(name), JSON.stringify(stored), 0o600);
    return publicRecord(stored);
  }

  async get(name: string): Promise<{ record: SecretRecord; value: Buffer }> {
    const s = await this.read(name);
    const key = await this.getKey();
    try {
      return { record: publicRecord(s), value: openSealed(key, name, s) };
    } catch {
      throw new InternalError(`secret ${name} does not open with ${this.keyPath}: its file was changed or damaged`);
    }
  }

  async remove(name: string): Promise<void> {
    await this.read(name);
    await rm(this.file(name), { force: true });
  }

  private file(name: string): string {
    return secretFile(this.dataDir, name);
  }

  private async read(name: string): Promise<StoredSecret> {
    try {
      return JSON.parse(await readFile(this.file(name), 'utf8')) as StoredSecret;
    } catch {
      throw new NotFoundError(`secret ${name} not found`);
    }
  }
}

function checkValue(key: Buffer): string {
  return createHmac('sha256', key).update(CHECK_LABEL).digest('hex');
}

function publicRecord(s: SecretRecord): SecretRecord {
  return { name: s.name, size: s.size, mode: s.mode, created_at: s.created_at, updated_at: s.updated_at };
}
