import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { guestSh, startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';
import type { ProcessInfo } from '../../src/domain/processes.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { makeTar } from '../helpers/tar.js';
import { ensureImage } from './image.js';

const FIXTURES = fileURLToPath(new URL('../../../test/e2e/fixtures/', import.meta.url));

/** A docker archive whose one layer holds `entries` (hostile ones included), as docker save lays it out. */
async function dockerArchive(path: string, entries: Parameters<typeof makeTar>[0]): Promise<void> {
  const layer = await makeTar(entries);
  const diff = `sha256:${createHash('sha256').update(layer).digest('hex')}`;
  const config = Buffer.from(
    JSON.stringify({ architecture: 'amd64', os: 'linux', config: {}, rootfs: { type: 'layers', diff_ids: [diff] } }),
  );
  const configName = `${createHash('sha256').update(config).digest('hex')}.json`;
  writeFileSync(
    path,
    await makeTar([
      { name: 'layer.tar', data: layer },
      { name: configName, data: config },
      {
        name: 'manifest.json',
        data: JSON.stringify([{ Config: configName, RepoTags: ['evil:latest'], Layers: ['layer.tar'] }]),
      },
    ]),
  );
}

/**
 * Container images people bring (issue 15): an OCI archive and a docker archive made in the test
 * with umoci and skopeo, imported through POST /images and booted on real QEMU; hostile imports
 * refused with nothing left behind.
 */
describe('svcd with QEMU: images from container image archives', function () {
  this.timeout(900_000);
  let d: TestDaemon;
  let registry: TestRegistry;
  let imports: string;
  let imagesDir: string;
  const sh = (vm: string, script: string) => guestSh(d, vm, script, { shell: '/bin/sh' });
  const leftovers = () => readdirSync(imagesDir).filter((n) => n.startsWith('.build-'));
  const processes = async (vm: string) => (await d.call('GET', `/vms/${vm}/processes`)).json as ProcessInfo[];
  /** The VM's entrypoint processes once one runs (the agent starts it as it comes up). */
  const entrypoints = async (vm: string) => {
    for (let i = 0; i < 100; i++) {
      const all = (await processes(vm)).filter((p) => p.tag === 'entrypoint');
      if (all.some((p) => p.state === 'running')) return all;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${vm}: no entrypoint running within 10 s`);
  };
  const SERVING = 'serving as app in /srv/app with from-image\n';

  before(async () => {
    imagesDir = ensureImage('minimal');
    imports = tempDir('svc-imports-');
    execFileSync('bash', [join(FIXTURES, 'make-oci.sh'), imports], { stdio: ['ignore', 'ignore', 'inherit'] });
    registry = await startRegistry(tempDir('svc-registry-'));
    registry.push(`oci-archive:${imports}/app.oci.tar`, 'team/app:1');
    d = await startTestDaemon({
      hypervisor: 'qemu',
      images_dir: imagesDir,
      import_dirs: [imports],
      insecure_registries: [registry.host],
      sandbox_metrics_enabled: false,
      ready_timeout: '120s',
    });
  });
  after(async () => {
    for (const vm of ['oci2', 'oci1', 'pulled1']) await d.call('DELETE', `/vms/${vm}`);
    for (const img of ['oci-app', 'docker-app', 'pulled-app']) await d.call('DELETE', `/images/${img}`);
    await d.stop();
    registry.stop();
    execFileSync('rm', ['-rf', imports]);
  });

  it("imports an OCI archive with progress, and a VM of it runs exec with the image's Env and WorkingDir over its layers", async () => {
    const r = await d.call('POST', '/images?stream=1', { name: 'oci-app', from: `oci-archive:${imports}/app.oci.tar` });
    expect(r.status, r.text).to.equal(200);
    const events = ndjson(r.text);
    const last = events.at(-1)!;
    expect(last.phase, r.text).to.equal('ready');
    expect(events.filter((e) => e.phase === 'import').length, r.text).to.be.greaterThan(2);
    expect(last.image).to.include({
      id: 'oci-app',
      agent_ready: true,
      boot: 'kernel',
      source: 'oci-archive:app.oci.tar',
    });
    // Its entrypoint started again whenever it ends (docker run --restart always).
    const c = await d.call('POST', '/vms', {
      name: 'oci1',
      image: 'oci-app',
      disk_gb: 2,
      persistent: true,
      entrypoint: { restart: 'always' },
    });
    expect(c.status, c.text).to.equal(201);
    const out = await sh(
      'oci1',
      'echo "$GREETING_ENV"; pwd; cat /etc/greeting; test -e /etc/gone && echo gone-is-there || echo gone-is-gone; cat /srv/app/added; cat /etc/passwd',
    );
    expect(out.stdout.trim().split('\n'), out.stdout + out.stderr).to.deep.equal([
      'from-image',
      '/srv/app',
      'upper',
      'gone-is-gone',
      'added',
      'root:x:0:0:root:/root:/bin/sh',
      'app:x:1000:1000:app:/srv/app:/bin/sh',
    ]);
    // The image's Entrypoint and Cmd run as docker run would run them: as its User, in its
    // WorkingDir, with its Env, as a durable process tagged entrypoint.
    expect((last.image as { entrypoint?: unknown }).entrypoint).to.deep.equal({
      cmd: '/bin/sh',
      args: [
        '-c',
        'trap "sleep 1; echo stopped gracefully > /tmp/stopped; echo stopped gracefully; exit 0" TERM; echo "serving as $(id -un) in $PWD with $GREETING_ENV"; while :; do sleep 1; done',
      ],
      user: 'app',
      cwd: '/srv/app',
      tag: 'entrypoint',
    });
    const [ep] = await entrypoints('oci1');
    expect(ep).to.include({ cmd: '/bin/sh', state: 'running', restart: 'always', restarts: 0 });
    const said = ndjson((await d.call('GET', '/vms/oci1/processes/entrypoint/output')).text);
    expect(said.filter((f) => f.stream === 'stdout').map((f) => f.data)).to.deep.equal([SERVING]);
    const uid = await sh('oci1', `/opt/svc/bin/busybox stat -c %u /proc/${ep.pid}`);
    expect(uid.stdout.trim()).to.equal('1000');
    // The disk is as large as asked for, and the image's own files were left as they are.
    const df = await sh('oci1', 'df -k / | tail -1');
    expect(Number(df.stdout.trim().split(/\s+/)[1]) * 1024).to.be.greaterThan(1.8 * 2 ** 30);
    // Files in and out, like any VM.
    const up = await d.call('PUT', '/vms/oci1/cp?path=/srv/app/in.txt', Buffer.from('hello from the host'), {
      'content-type': 'application/octet-stream',
    });
    expect(up.status, up.text).to.equal(204);
    expect((await sh('oci1', 'cat in.txt')).stdout).to.equal('hello from the host');
  });

  it('powers off on the power button and boots again with its files and environment', async () => {
    // The entrypoint killed in the guest is started again (its restart policy)...
    const [first] = await entrypoints('oci1');
    await sh('oci1', `kill -9 ${first.pid}`);
    let restarted = first;
    for (let i = 0; i < 100 && !(restarted.restarts === 1 && restarted.pid !== first.pid); i++) {
      await new Promise((r) => setTimeout(r, 200));
      [restarted] = await entrypoints('oci1');
    }
    expect(restarted).to.include({ id: first.id, state: 'running', restarts: 1 });
    // ...but not by the power button's TERM: the init asks its keeper first.
    const before = (await processes('oci1')).filter((p) => p.tag === 'entrypoint');
    const s = await d.call('POST', '/vms/oci1/shutdown');
    expect(s.status, s.text).to.equal(200);
    expect((await d.call('GET', '/vms/oci1')).json).to.include({ status: 'stopped' });
    // The init's power-button handler ran and the kernel powered off (not the daemon's kill after
    // shutdown_timeout).
    const log = await d.call('GET', '/vms/oci1/logs');
    expect(log.text).to.contain('svc-init: power button: powering off');
    expect(log.text).to.contain('reboot: Power down');
    expect((await d.call('POST', '/vms/oci1/start')).status).to.equal(200);
    const out = await sh('oci1', 'cat in.txt; echo "$GREETING_ENV"; cat /tmp/stopped');
    expect(out.stdout).to.equal('hello from the hostfrom-image\nstopped gracefully\n');
    // The entrypoint was asked to stop and given the time it took (a second), not killed at once;
    // what it said on its way out is kept. A cold boot runs it again.
    expect(log.text).to.not.contain('what did not stop in 10 s is killed');
    expect(log.text).to.match(/svc-init: power button: every process stopped within \d+\.\d s/);
    const after = await entrypoints('oci1');
    expect(after).to.have.length(before.length + 1);
    expect(after[0]).to.include({ id: before[0].id, state: 'ended', exit_code: 0, restarts: 1 });
    const last = ndjson((await d.call('GET', `/vms/oci1/processes/${before[0].id}/output`)).text);
    const printed = last.filter((f) => f.stream === 'stdout').map((f) => f.data);
    expect(printed.join('')).to.equal(`${SERVING}${SERVING}stopped gracefully\n`);
    expect(after[1]).to.include({ state: 'running' });
  });

  it('clones from a suspended template of it: the clone has its own name and clock (the image has no date or ip of its own)', async () => {
    expect((await d.call('POST', '/vms/oci1/suspend')).status).to.equal(200);
    const c = await d.call('POST', '/vms', { name: 'oci2', from: 'oci1' });
    expect(c.status, c.text).to.equal(201);
    const out = await sh('oci2', 'cat /proc/sys/kernel/hostname; cat in.txt; echo; echo "$GREETING_ENV"');
    expect(out.stdout.trim().split('\n')).to.deep.equal(['oci2', 'hello from the host', 'from-image']);
    // The clone's guest is its template's, restored: its entrypoint runs on, and no second one starts.
    const running = (await entrypoints('oci2')).filter((p) => p.state === 'running');
    expect(running).to.have.length(1);
    expect(running[0]).to.include({ started_in: 'oci1' });
    expect((await d.call('DELETE', '/vms/oci2')).status).to.equal(200);
  });

  it('imports a docker archive of the same image', async () => {
    const r = await d.call('POST', '/images', { name: 'docker-app', from: `docker-archive:${imports}/app.docker.tar` });
    expect(r.status, r.text).to.equal(201);
    expect(r.json).to.include({ id: 'docker-app', agent_ready: true, source: 'docker-archive:app.docker.tar' });
  });

  it('pulls the same image from a registry with a login, and a VM of it boots with its layers and Env', async () => {
    const r = await d.call('POST', '/images', {
      name: 'pulled-app',
      from: `docker://${registry.host}/team/app:1`,
      registry_auth: { username: registry.username, password: registry.password },
    });
    expect(r.status, r.text).to.equal(201);
    expect(r.json).to.include({ id: 'pulled-app', agent_ready: true, source: `docker://${registry.host}/team/app:1` });
    // A VM that asks not to run the image's entrypoint: nothing runs but what exec starts.
    const c = await d.call('POST', '/vms', { name: 'pulled1', image: 'pulled-app', disk_gb: 2, entrypoint: false });
    expect(c.status, c.text).to.equal(201);
    const out = await sh('pulled1', 'cat /etc/greeting; echo "$GREETING_ENV"; pwd; ls /run/svc/seed');
    expect(out.stdout, out.stderr).to.match(/^upper\nfrom-image\n\/srv\/app\n/);
    expect(out.stdout).to.not.contain('entrypoint.json');
    expect((await processes('pulled1')).filter((p) => p.tag === 'entrypoint')).to.deep.equal([]);
    expect((await d.call('DELETE', '/vms/pulled1')).status).to.equal(200);
  });

  it('refuses hostile imports with 400 and leaves nothing behind', async () => {
    const before = ((await d.call('GET', '/images')).json as { id: string }[]).map((i) => i.id).sort();
    const outside = tempDir('svc-outside-');
    execFileSync('cp', [join(imports, 'app.oci.tar'), join(outside, 'app.tar')]);
    symlinkSync(join(outside, 'app.tar'), join(imports, 'link-out.tar'));
    writeFileSync(join(imports, 'notes.qcow2'), 'just some text, not a disk\n'.repeat(100));
    writeFileSync(join(imports, 'random.tar'), Buffer.alloc(4096, 7));
    await dockerArchive(join(imports, 'escape.tar'), [
      { name: 'etc/ok', data: 'ok' },
      { name: '../../escaped', data: 'out' },
    ]);
    await dockerArchive(join(imports, 'hardlink.tar'), [
      { name: 'etc/ok', data: 'ok' },
      { name: 'etc/shadow-link', type: 'link', linkname: '../../../etc/shadow' },
    ]);
    mkdirSync(join(imports, 'dir.tar'));
    const cases: [string, RegExp][] = [
      [`oci-archive:${outside}/app.tar`, /outside the folders images may be imported from/],
      [`oci-archive:${imports}/link-out.tar`, /link-out.tar is a link that leads outside the folders/],
      [`disk:${imports}/notes.qcow2`, /neither a qcow2 nor a raw disk/],
      [`oci-archive:${imports}/random.tar`, /not a tar archive/],
      [`docker-archive:${imports}/escape.tar`, /would land outside the image root/],
      [`docker-archive:${imports}/hardlink.tar`, /points outside the image root/],
      [`oci-archive:${imports}/dir.tar`, /not a regular file/],
      [`oci-archive:${imports}/missing.tar`, /does not exist/],
      [`oci-archive:relative/app.tar`, /absolute path/],
    ];
    for (const [from, why] of cases) {
      const r = await d.call('POST', '/images', { name: 'hostile', from });
      expect(r.status, `${from}: ${r.text}`).to.equal(400);
      expect((r.json as { error: string }).error, from).to.match(why);
    }
    const after = ((await d.call('GET', '/images')).json as { id: string }[]).map((i) => i.id).sort();
    expect(after).to.deep.equal(before);
    expect(leftovers()).to.deep.equal([]);
    expect(existsSync(join(imagesDir, 'hostile'))).to.equal(false);
    execFileSync('rm', ['-rf', outside]);
  });
});
