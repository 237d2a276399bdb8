import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { ConfinedDir } from '../../../../src/adapters/fs-kit/confined-dir.js';

/** The error `p` fails with (it must fail). */
async function failure(p: Promise<unknown>): Promise<Error> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  if (!err) throw new Error('expected a failure');
  return err;
}

const text = async (r: Readable) => {
  const parts: Buffer[] = [];
  for await (const c of r) parts.push(c as Buffer);
  return Buffer.concat(parts).toString();
};

describe('ConfinedDir: a host folder a guest writes into, used without following its links', () => {
  let base: string;
  let root: string;
  let outside: string;
  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), 'svc-confined-'));
    root = join(base, 'root');
    outside = join(base, 'outside');
    mkdirSync(join(root, 'd'), { recursive: true });
    mkdirSync(outside);
    writeFileSync(join(root, 'd', 'f'), 'inside');
    writeFileSync(join(outside, 'f'), 'OUTSIDE');
  });
  // maxRetries: a swapper's last mv or ln may still land while the folder is being removed
  afterEach(async () => rm(base, { recursive: true, force: true, maxRetries: 5 }));

  it('reads, writes, lists and removes inside its root; refuses .. and links on the way or at the end', async () => {
    const c = new ConfinedDir(root);
    expect(await text((await c.read('/d/f')).stream)).to.equal('inside');
    await c.write('d/e/new.txt', Readable.from([Buffer.from('made')]), { parents: true });
    expect(readFileSync(join(root, 'd', 'e', 'new.txt'), 'utf8')).to.equal('made');
    expect((await c.list('/', 3)).map((e) => e.path)).to.deep.equal(['/d', '/d/e', '/d/e/new.txt', '/d/f']);
    expect(
      (await c.list('/', 3, 2)).map((e) => e.path),
      'a bounded listing',
    ).to.deep.equal(['/d', '/d/e']);
    symlinkSync(outside, join(root, 'out'));
    symlinkSync(join(outside, 'f'), join(root, 'leak'));
    expect((await failure(c.read('../outside/f'))).message).to.match(/\.\. is not allowed/);
    expect((await failure(c.read('out/f'))).message).to.match(/\/out is not a folder \(links are not followed\)/);
    expect((await failure(c.read('leak'))).message).to.match(/leak is a link/);
    await failure(c.write('out/x', Readable.from([Buffer.from('x')])));
    await failure(c.mkdir('out/x'));
    expect((await failure(c.setMeta('leak', { mode: 0o777 }))).message).to.match(/is a link/);
    expect((await c.stat('leak')).target).to.equal(join(outside, 'f'));
    await c.remove('out');
    await c.remove('leak');
    expect(existsSync(join(outside, 'f'))).to.equal(true);
    expect(existsSync(join(outside, 'x'))).to.equal(false);
  });

  it('never reaches outside while a folder on the way is swapped for a link again and again', async function () {
    this.timeout(20_000);
    const c = new ConfinedDir(root);
    // what a guest could do through its share: d becomes a link to the outside and back, in a loop
    const swapper = spawn(
      'sh',
      [
        '-c',
        `cd ${root} && while :; do mv d d.x 2>/dev/null; ln -s ${outside} d 2>/dev/null; rm -f d; mv d.x d 2>/dev/null; done`,
      ],
      { detached: true },
    );
    const ended = new Promise((r) => swapper.once('exit', r));
    const seen = new Set<string>();
    try {
      for (let i = 0; i < 400; i++) {
        const got = await c.read('d/f').then(
          async (r) => text(r.stream),
          () => 'refused',
        );
        seen.add(got);
        await c.write(`d/w${i}`, Readable.from([Buffer.from('w')])).catch(() => undefined);
        await c.setMeta('d/f', { mode: 0o600 }).catch(() => undefined);
        await c.remove(`d/w${i}`).catch(() => undefined);
      }
    } finally {
      // the shell and the mv or ln it runs: its whole group, so nothing moves once the checks begin
      process.kill(-swapper.pid!, 'SIGKILL');
      await ended;
    }
    expect(
      [...seen].every((s) => s === 'inside' || s === 'refused'),
      [...seen].join(','),
    ).to.equal(true);
    expect(readFileSync(join(outside, 'f'), 'utf8')).to.equal('OUTSIDE');
    expect(readdirSync(outside), 'nothing written outside').to.deep.equal(['f']);
    expect(statSync(join(outside, 'f')).mode & 0o777, 'nothing changed outside').to.not.equal(0o600);
  });
});
