import { expect } from 'chai';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BuildRecords } from '../../../../src/adapters/e2b/build-records.js';
import type { Build, BuildStatus } from '../../../../src/adapters/e2b/template-run.js';
import { TemplateBuilds } from '../../../../src/adapters/e2b/templates.js';
import type { SvcClient } from '../../../../src/adapters/client/svc-client.js';
import { poll } from '../../../helpers/wait.js';

function build(id: string, status: BuildStatus): Build {
  return {
    templateID: 'tpl-0123456789abcdef',
    buildID: id,
    name: 'app',
    tags: ['default'],
    status,
    logs: status === 'waiting' ? [] : [{ timestamp: '2026-12-02T00:00:00.000Z', level: 'info', message: 'step 1' }],
  };
}

describe('E2B template builds kept on disk (BuildRecords)', () => {
  let dir: string;
  beforeEach(() => (dir = join(mkdtempSync(join(tmpdir(), 'svc-build-records-')), 'builds')));
  afterEach(() => rmSync(join(dir, '..'), { recursive: true, force: true }));

  it('reads back what was kept, oldest first, and keeps only the last of writes made one after the other', async () => {
    const records = new BuildRecords(dir);
    const a = build('00000000000000aa', 'waiting');
    const b = build('00000000000000bb', 'ready');
    void records.save(b);
    void records.save(a);
    a.status = 'building';
    void records.save(a);
    a.status = 'ready';
    await records.save(a);
    // mtimes say the order: b was requested before a
    utimesSync(join(dir, `${b.buildID}.json`), new Date(1000), new Date(1000));
    utimesSync(join(dir, `${a.buildID}.json`), new Date(2000), new Date(2000));
    const loaded = await new BuildRecords(dir).load();
    expect(loaded.map((x) => [x.buildID, x.status])).to.deep.equal([
      [b.buildID, 'ready'],
      [a.buildID, 'ready'],
    ]);
    expect(loaded[1]).to.deep.equal(a);
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).to.deep.equal([]);
  });

  it('turns a build a stop cut off into one that failed, saying why, and keeps it so', async () => {
    const cut = build('00000000000000cc', 'building');
    await new BuildRecords(dir).save(cut);
    const [b] = await new BuildRecords(dir).load();
    expect(b.status).to.equal('error');
    expect(b.reason?.message).to.match(/svcd stopped while this build ran/);
    expect(b.logs.at(-1)).to.include({ level: 'error', message: b.reason?.message });
    expect(b.logs[0].message, 'its log so far stays').to.equal('step 1');
    const again = JSON.parse(readFileSync(join(dir, `${cut.buildID}.json`), 'utf8')) as Build;
    expect(again.status).to.equal('error');
  });

  it('drops what is not a record of its own (not JSON, another shape, a name that is no build id), and forgets removed builds', async () => {
    const records = new BuildRecords(dir);
    await records.save(build('00000000000000dd', 'ready'));
    writeFileSync(join(dir, '00000000000000ee.json'), '{"buildID":"00000000000000ee"');
    writeFileSync(join(dir, '00000000000000ff.json'), JSON.stringify({ ...build('0000000000000011', 'ready') }));
    writeFileSync(
      join(dir, '0000000000000022.json'),
      JSON.stringify({ ...build('0000000000000022', 'done' as never) }),
    );
    writeFileSync(join(dir, 'notes.json'), '{}');
    const loaded = await new BuildRecords(dir).load();
    expect(loaded.map((x) => x.buildID)).to.deep.equal(['00000000000000dd']);
    expect(readdirSync(dir).sort()).to.deep.equal(['00000000000000dd.json', 'notes.json']);
    await records.remove('00000000000000dd');
    expect(existsSync(join(dir, '00000000000000dd.json'))).to.equal(false);
    expect(await new BuildRecords(join(dir, 'none')).load()).to.deep.equal([]);
  });
});

describe('E2B template builds requested and never started (TemplateBuilds)', () => {
  it('keeps the newest 100 of them across a restart, not every one ever asked for', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-template-builds-'));
    try {
      // requesting a build asks nothing of the daemon
      const builds = new TemplateBuilds({} as SvcClient, dir);
      const asked = Array.from({ length: 105 }, (_, i) => builds.request({ name: `app${i}` }));
      const files = () => (existsSync(join(dir, 'builds')) ? readdirSync(join(dir, 'builds')) : []);
      await poll(() => files().length === 101 && !files().some((f) => f.endsWith('.tmp')), { every: 20 });
      expect(files()).to.have.length(101);
      const again = new TemplateBuilds({} as SvcClient, dir);
      await again.open();
      const status = (i: number) => again.status(asked[i].templateID, asked[i].buildID, 0).status;
      expect(() => status(0)).to.throw(/not found/);
      expect(() => status(3)).to.throw(/not found/);
      expect(status(4)).to.equal('waiting');
      expect(status(104)).to.equal('waiting');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
