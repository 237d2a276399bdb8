import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_DIR, BUILD_SCRIPT, builtinInputs } from '../../../../src/adapters/images/image-builds.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import { ImageCatalog } from '../../../../src/adapters/images/image-catalog.js';

describe('adapters/images/image-catalog', () => {
  const made: string[] = [];
  afterEach(() => made.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

  // The catalog builds built-in images on first use with these; a moved file once pointed them
  // one folder above the repository, and only a real image build noticed.
  it('finds the image build script and the agent artifact in this repository', () => {
    expect(existsSync(BUILD_SCRIPT), BUILD_SCRIPT).to.equal(true);
    expect(AGENT_DIR).to.match(/\/dist\/agent$/);
    expect(existsSync(AGENT_DIR.replace(/\/dist\/agent$/, '/package.json')), AGENT_DIR).to.equal(true);
  });

  it("removes at its start the temporary directories of makers that are gone, not a live one's or a fetch's", async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-catalog-'));
    made.push(root);
    // A pid that is no process: above the kernel's largest.
    const dead = join(root, '.build-debian-4194305-1764000000000');
    const deadWork = join(root, '.build-imported-4194305-1764000000001.work');
    const live = join(root, `.build-mine-${process.pid}-1764000000000`);
    for (const d of [dead, deadWork, live, join(root, '.fetch-shared'), join(root, 'kept')]) {
      mkdirSync(d);
      writeFileSync(join(d, 'disk.qcow2'), 'half');
    }
    writeFileSync(join(root, '.build-times.json'), '{}');
    const c = new ImageCatalog(root);
    expect((await c.swept).sort()).to.deep.equal([
      '.build-debian-4194305-1764000000000',
      '.build-imported-4194305-1764000000001.work',
    ]);
    expect(existsSync(dead) || existsSync(deadWork)).to.equal(false);
    for (const f of [live, join(root, '.fetch-shared'), join(root, 'kept'), join(root, '.build-times.json')])
      expect(existsSync(f), f).to.equal(true);
  });

  /**
   * A stand-in for image/build-image.sh over `root`: counts its builds (`build N` in the
   * description, N in every file), and waits for `release` to exist to finish one.
   */
  function standIn(root: string): { script: string; release: string } {
    const release = join(root, '..', `${root.split('/').pop()}.release`);
    const script = join(root, '..', `${root.split('/').pop()}.build.sh`);
    made.push(release, script);
    writeFileSync(
      script,
      [
        'OUT=$1; ID=$3; COUNT=$(dirname "$OUT")/.count',
        'n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo $n > "$COUNT"',
        `while [ ! -e '${release}' ]; do sleep 0.02; done`,
        'mkdir -p "$OUT"; printf "k$n" > "$OUT/vmlinux"; printf "i$n" > "$OUT/initrd.img"; printf "d$n" > "$OUT/disk.qcow2"',
        'printf \'{"id":"%s","format":1,"description":"build %s","kernel":"vmlinux","initrd":"initrd.img","disk":"disk.qcow2","disk_gb":1,"cmdline":"","ssh_user":"root","agent_ready":true}\' "$ID" "$n" > "$OUT/manifest.json"',
      ].join('\n'),
    );
    return { script, release };
  }

  /** A qcow2 header naming `backing` as its backing file (all that the catalog reads of a disk). */
  function qcow2On(path: string, backing: string): void {
    const name = Buffer.from(backing);
    const head = Buffer.alloc(512 + name.length);
    head.writeUInt32BE(0x514649fb, 0);
    head.writeUInt32BE(3, 4);
    head.writeBigUInt64BE(512n, 8);
    head.writeUInt32BE(name.length, 16);
    name.copy(head, 512);
    writeFileSync(path, head);
  }

  it('keeps the build a VM stands on when it builds the image anew: the VM boots its own, new VMs the new one, and it goes when no VM stands on it', async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-catalog-'));
    const vms = mkdtempSync(join(tmpdir(), 'svc-catalog-vms-'));
    made.push(root, vms);
    const { script, release } = standIn(root);
    writeFileSync(release, '');
    const c = new ImageCatalog(root, script);
    await c.ensure('minimal');
    const first = await c.get('minimal');
    // one VM on the image's disk, one on a template's layer (a relative name) on it
    const dir = join(root, 'minimal');
    mkdirSync(join(vms, 'a'));
    qcow2On(join(vms, 'a', 'disk.qcow2'), join(dir, 'disk.qcow2'));
    mkdirSync(join(vms, 'b'));
    qcow2On(join(vms, 'b', 'base-0123456789abcdef.qcow2'), join(dir, 'disk.qcow2'));
    qcow2On(join(vms, 'b', 'disk.qcow2'), 'base-0123456789abcdef.qcow2');

    await c.rebuild('minimal');
    const now = await c.get('minimal');
    expect(now.description).to.equal('build 2');
    expect(now.disk).to.match(/^build-[0-9a-z]+-disk\.qcow2$/);
    expect(readFileSync(join(dir, now.kernel), 'utf8')).to.equal('k2');
    for (const vm of ['a', 'b']) {
      const theirs = await c.get('minimal', join(vms, vm, 'disk.qcow2'));
      expect(theirs, vm).to.deep.equal(first);
      expect(readFileSync(join(dir, theirs.kernel), 'utf8')).to.equal('k1');
    }
    // a disk that stands on nothing of the image's (a new VM's, not made yet): the current build
    expect((await c.get('minimal', join(vms, 'none.qcow2'))).description).to.equal('build 2');
    expect(await c.details('minimal')).to.include({ older_builds: 1 });
    expect(c.info('minimal')).not.to.have.property('outdated');

    // a third build keeps both older ones; a VM on the second gets the second, and while it is
    // being built a VM's disk resolves to its build at once (a start does not wait for it)
    mkdirSync(join(vms, 'c'));
    qcow2On(join(vms, 'c', 'disk.qcow2'), join(dir, now.disk));
    rmSync(release);
    const third = c.rebuild('minimal');
    expect(c.info('minimal')).to.include({ built: false });
    expect((await c.get('minimal', join(vms, 'c', 'disk.qcow2'))).description).to.equal('build 2');
    expect((await c.get('minimal', join(vms, 'a', 'disk.qcow2'))).description).to.equal('build 1');
    writeFileSync(release, '');
    await third;
    expect((await c.get('minimal')).description).to.equal('build 3');
    expect((await c.get('minimal', join(vms, 'c', 'disk.qcow2'))).description).to.equal('build 2');
    expect((await c.get('minimal', join(vms, 'a', 'disk.qcow2'))).description).to.equal('build 1');
    expect(await c.details('minimal')).to.include({ older_builds: 2 });

    const disk = (vm: string) => join(vms, vm, 'disk.qcow2');
    expect(await c.forgetOlderBuilds(() => ['a', 'b', 'c'].map(disk))).to.deep.equal([]);
    // a disk whose build cannot be told keeps them all
    expect(await c.forgetOlderBuilds(() => [disk('c'), join(vms, 'gone.qcow2')])).to.deep.equal([]);
    // a and b deleted: the first build goes, c's stays
    expect(await c.forgetOlderBuilds(() => [disk('c')])).to.deep.equal(['minimal']);
    for (const f of ['vmlinux', 'initrd.img', 'disk.qcow2']) expect(existsSync(join(dir, f)), f).to.equal(false);
    expect(await c.details('minimal')).to.include({ older_builds: 1 });
    expect((await c.get('minimal', disk('c'))).description).to.equal('build 2');
    expect(await c.forgetOlderBuilds(() => [])).to.deep.equal(['minimal']);
    const left = (await c.get('minimal'))!;
    expect(readdirSync(dir).sort()).to.deep.equal([left.disk, left.initrd, left.kernel, 'manifest.json'].sort());
    expect(await c.details('minimal')).not.to.have.property('older_builds');
    expect(await c.forgetOlderBuilds(() => [])).to.deep.equal([]);
    // what a crash in the middle of a new build's install leaves: the current manifest kept as an
    // older build, and a moved-in file no manifest names; neither counts, and both go
    mkdirSync(join(dir, 'older-builds'));
    writeFileSync(join(dir, 'older-builds', 'x.json'), readFileSync(join(dir, 'manifest.json')));
    writeFileSync(join(dir, 'build-zz9-disk.qcow2'), 'half');
    expect(await c.details('minimal')).not.to.have.property('older_builds');
    expect(await c.forgetOlderBuilds(() => [])).to.deep.equal(['minimal']);
    expect(readdirSync(dir).sort()).to.deep.equal([left.disk, left.initrd, left.kernel, 'manifest.json'].sort());
  });

  it('stamps what a built-in image is built from; one built from other inputs is outdated, and is built again while creates wait for the new one', async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-catalog-'));
    made.push(root);
    // A stand-in for image/build-image.sh: counts its builds, and waits for `release` to finish one.
    const { script, release } = standIn(root);
    const c = new ImageCatalog(root, script);
    writeFileSync(release, '');
    await c.ensure('minimal');
    const manifest = join(root, 'minimal', 'manifest.json');
    const stamped = JSON.parse(readFileSync(manifest, 'utf8')) as Record<string, unknown>;
    expect(stamped.inputs_digest)
      .to.equal(builtinInputs())
      .and.to.match(/^sha256:[0-9a-f]{64}$/);
    expect(c.info('minimal')).to.include({ built: true }).and.not.to.have.property('outdated');
    expect(await c.details('minimal')).not.to.have.property('outdated');
    // as an older svc left it
    const { inputs_digest: _older, ...old } = stamped;
    writeFileSync(manifest, JSON.stringify(old));
    expect(c.info('minimal')).to.include({ built: true, outdated: true });
    expect(await c.details('minimal')).to.include({ outdated: true });

    rmSync(release);
    const rebuilt = c.rebuild('minimal');
    expect(c.info('minimal'), 'a create waits for the new one').to.include({ built: false, outdated: true });
    let resolved = false;
    const got = c.get('minimal').then((r) => ((resolved = true), r));
    await new Promise((r) => setTimeout(r, 200));
    expect(resolved).to.equal(false);
    // the old one stays whole until the new one is complete
    expect(JSON.parse(readFileSync(manifest, 'utf8')).description).to.equal('build 1');
    writeFileSync(release, '');
    await rebuilt;
    expect((await got).description).to.equal('build 2');
    expect(c.info('minimal')).to.include({ built: true }).and.not.to.have.property('outdated');
    expect(readFileSync(join(root, '.count'), 'utf8').trim()).to.equal('2');
    const refused = await c.rebuild('cloud').catch((e: Error) => e);
    expect(refused).to.be.instanceOf(InvalidArgumentError);
    expect((refused as Error).message).to.match(/not built-in/);
  });

  it('tells a create how much memory an image boots in and how long its last build took here', () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-catalog-'));
    made.push(root);
    const c = new ImageCatalog(root);
    expect(c.info('minimal')).to.include({ built: false, min_memory_mb: 128 });
    expect(c.info('default')).to.include({ id: 'debian', min_memory_mb: 256 });
    expect(c.info('debian').build_estimate_ms).to.equal(undefined);
    writeFileSync(join(root, '.build-times.json'), JSON.stringify({ debian: 71_000 }));
    expect(c.info('debian').build_estimate_ms).to.equal(71_000);
    // A recipe on debian needs what debian needs; an imported disk the default.
    for (const [id, source] of [
      ['on-debian', 'recipe:debian'],
      ['cloud', 'disk:bookworm.qcow2'],
    ]) {
      mkdirSync(join(root, id));
      writeFileSync(
        join(root, id, 'manifest.json'),
        JSON.stringify({
          id,
          format: 1,
          kernel: '',
          initrd: '',
          disk: 'disk.qcow2',
          disk_gb: 3,
          cmdline: '',
          ssh_user: 'root',
          agent_ready: true,
          source,
        }),
      );
    }
    expect(c.info('on-debian')).to.include({ built: true, min_memory_mb: 256 });
    expect(c.info('cloud')).to.include({ built: true, min_memory_mb: 128 });
  });
});
