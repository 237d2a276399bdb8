import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { inject, injectable } from 'inversify';
import type { Config } from '../../app/config.js';
import { AppConfig } from '../../app/tokens.js';
import type { SshKeys } from '../../ports/tunnels.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { generateEd25519 } from './keygen.js';

/** The daemon's own ed25519 key pair in `<data_dir>/ssh/`, made on first use. */
@injectable()
export class FsSshKeys implements SshKeys {
  private pair: Promise<{ pub: string; priv: Buffer }> | undefined;
  private readonly dir: string;

  constructor(@inject(AppConfig) config: Config) {
    this.dir = join(config.data_dir, 'ssh');
  }

  private load(): Promise<{ pub: string; priv: Buffer }> {
    this.pair ??= (async () => {
      const privPath = join(this.dir, 'id_ed25519');
      const pubPath = `${privPath}.pub`;
      try {
        return { priv: await readFile(privPath), pub: (await readFile(pubPath, 'utf8')).trim() };
      } catch {
        await mkdir(this.dir, { recursive: true, mode: 0o700 });
        const kp = generateEd25519('svcd');
        await writeFileAtomic(privPath, kp.private, 0o600);
        await writeFileAtomic(pubPath, kp.public + '\n', 0o644);
        return { priv: Buffer.from(kp.private), pub: kp.public.trim() };
      }
    })();
    return this.pair;
  }

  async publicKey(): Promise<string> {
    return (await this.load()).pub;
  }

  async privateKey(): Promise<Buffer> {
    return (await this.load()).priv;
  }
}
