import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../../src/domain/errors.js';
import { normalRegistryRef, type ImportRules, type RegistrySource } from '../../src/domain/image-request.js';
import { ImageCatalog } from '../../src/adapters/images/image-catalog.js';
import type { ImageProgress } from '../../src/ports/guest-images.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

const FIXTURES = fileURLToPath(new URL('../../../test/e2e/fixtures/', import.meta.url));

/**
 * Container images pulled from a registry (`docker://REF`): a real registry of the test's own
 * (Debian's docker-registry, plain HTTP, a login) and the real import (skopeo, umoci and
 * build-image.sh's oci kind) into an image catalog, as the QEMU daemon runs it.
 */
describe('images pulled from a registry (docker://, a real local registry)', function () {
  this.timeout(180_000);
  let registry: TestRegistry;
  let catalog: ImageCatalog;

  before(async () => {
    const fixtures = tempDir('svc-pull-fixture-');
    execFileSync('bash', [join(FIXTURES, 'make-oci.sh'), fixtures], { stdio: ['ignore', 'ignore', 'inherit'] });
    registry = await startRegistry(tempDir('svc-registry-'));
    registry.push(`oci-archive:${join(fixtures, 'app.oci.tar')}`, 'team/app:1');
    catalog = new ImageCatalog(tempDir('svc-pull-images-'));
  });
  after(() => registry?.stop());

  const source = (path: string, auth = true): RegistrySource => ({
    type: 'docker',
    ref: normalRegistryRef(`${registry.host}/${path}`),
    ...(auth ? { auth: { username: registry.username, password: registry.password } } : {}),
  });
  const rules = (insecure = true): ImportRules => ({ dirs: [], insecureRegistries: insecure ? [registry.host] : [] });
  const refused = async (id: string, src: RegistrySource, r: ImportRules, why: RegExp) => {
    const err = await catalog.import(id, src, r, {}, () => undefined).catch((e: unknown) => e);
    expect(err, String(err)).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.match(why);
    expect(existsSync(catalog.dir(id)), 'no image is left').to.equal(false);
    expect(
      readdirSync(catalog.root).filter((n) => n.startsWith('.build-')),
      'no work folder is left',
    ).to.deep.equal([]);
  };

  it("pulls an image with the registry's login into an image with its layers, Env and WorkingDir, its source the reference", async () => {
    const seen: ImageProgress[] = [];
    await catalog.import('pulled', source('team/app:1'), rules(), {}, (p) => seen.push(p));
    expect(seen[0].message).to.equal(`pulling docker://${registry.host}/team/app:1 with skopeo`);
    const [img] = (await catalog.list()).filter((i) => i.id === 'pulled');
    expect(img.source).to.equal(`docker://${registry.host}/team/app:1`);
    expect(img.agent_ready).to.equal(true);
    const manifest = JSON.parse(readFileSync(join(catalog.dir('pulled'), 'manifest.json'), 'utf8')) as {
      image_config?: { Env?: string[]; WorkingDir?: string };
    };
    expect(manifest.image_config?.Env).to.include('GREETING_ENV=from-image');
    expect(manifest.image_config?.WorkingDir).to.equal('/srv/app');
    // what its VMs run at boot, and only where the image's init hands it to the agent
    expect(img.entrypoint).to.include({ cmd: '/bin/sh', user: 'app', cwd: '/srv/app', tag: 'entrypoint' });
    expect(catalog.info('pulled').entrypoint).to.deep.equal(img.entrypoint);
    const mpath = join(catalog.dir('pulled'), 'manifest.json');
    const text = readFileSync(mpath, 'utf8');
    writeFileSync(mpath, JSON.stringify({ ...JSON.parse(text), runs_entrypoint: undefined }));
    expect(catalog.info('pulled'), 'an image imported before its init ran entrypoints').to.not.have.property(
      'entrypoint',
    );
    writeFileSync(mpath, text);
    // the layers are applied in order: the upper layer's file, the whited-out one gone
    const disk = join(catalog.dir('pulled'), 'disk.qcow2');
    const raw = join(tempDir('svc-pull-disk-'), 'disk.raw');
    execFileSync('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', disk, raw]);
    const cat = (path: string) =>
      execFileSync('debugfs', ['-R', `cat ${path}`, raw], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    expect(cat('/etc/greeting')).to.equal('upper\n');
    expect(cat('/srv/app/added')).to.equal('added\n');
    expect(cat('/etc/gone')).to.equal('');
    expect(
      readdirSync(catalog.root).filter((n) => n.startsWith('.build-')),
      'the work folder (the auth file with the login in it) is gone',
    ).to.deep.equal([]);
  });

  it('refuses, leaving nothing: no login, a tag the registry lacks, plain HTTP not allowed, a registry not there', async () => {
    await refused('anon', source('team/app:1', false), rules(), /authentication required|unauthorized/);
    await refused('notag', source('team/app:2'), rules(), /manifest unknown/);
    await refused(
      'https',
      source('team/app:1'),
      rules(false),
      new RegExp(`add ${registry.host.replace(/\./g, '\\.')} to the daemon's insecure_registries`),
    );
    const gone: RegistrySource = { type: 'docker', ref: normalRegistryRef('127.0.0.1:1/team/app:1') };
    await refused('nowhere', gone, { dirs: [], insecureRegistries: ['127.0.0.1:1'] }, /connection refused/);
  });

  it('says what a tag is now (the digest a pull would take), a tag that moved a new one, and what the registry refuses', async () => {
    const fixtures = tempDir('svc-pull-moved-');
    execFileSync('bash', [join(FIXTURES, 'make-oci.sh'), fixtures], { stdio: ['ignore', 'ignore', 'inherit'] });
    registry.push(`oci-archive:${join(fixtures, 'app.oci.tar')}`, 'team/moving:1');
    const first = await catalog.registryDigest(source('team/moving:1'), [registry.host]);
    expect(first).to.match(/^sha256:[a-f0-9]{64}$/);
    expect(await catalog.registryDigest(source('team/moving:1'), [registry.host]), 'asked again').to.equal(first);
    // the same image, pushed as a docker archive: another manifest under the same tag
    registry.push(`docker-archive:${join(fixtures, 'app.docker.tar')}`, 'team/moving:1');
    const moved = await catalog.registryDigest(source('team/moving:1'), [registry.host]);
    expect(moved).to.match(/^sha256:[a-f0-9]{64}$/);
    expect(moved).to.not.equal(first);
    // a pull pinned to that digest takes that version
    await catalog.import('pinned', { ...source(`team/moving@${moved}`) }, rules(), {}, () => undefined);
    expect((await catalog.details('pinned')).source).to.equal(`docker://${registry.host}/team/moving@${moved}`);
    for (const [src, why] of [
      [source('team/moving:1', false), /authentication required|unauthorized/],
      [source('team/moving:9'), /manifest unknown/],
    ] as const) {
      const err = await catalog.registryDigest(src, [registry.host]).catch((e: unknown) => e);
      expect(err, String(err)).to.be.instanceOf(InvalidArgumentError);
      expect((err as Error).message).to.match(why);
    }
    expect(
      readdirSync(catalog.root).filter((n) => n.startsWith('.resolve-')),
      'no login folder is left',
    ).to.deep.equal([]);
  });

  describe('through the API (fake hypervisor)', () => {
    let d: TestDaemon;
    before(async () => {
      d = await startTestDaemon({ fake_agent: true });
    });
    after(() => d?.stop());

    it('takes a docker:// import with a login, and the login is in no event, activity entry or image', async () => {
      const pw = 'never-shown-9f3a';
      const res = await d.call('POST', '/images?stream=1', {
        name: 'hub-app',
        from: 'docker://team/app:7',
        registry_auth: { username: 'me', password: pw },
      });
      const events = ndjson(res.text);
      expect(events[0].message).to.equal('importing image hub-app from docker://docker.io/team/app:7');
      expect(events.at(-1)!.phase).to.equal('ready');
      expect(res.text).to.not.include(pw);
      expect(JSON.stringify((await d.call('GET', '/activity')).json)).to.not.include(pw);
      expect(JSON.stringify((await d.call('GET', '/images/hub-app')).json)).to.not.include(pw);
      const bad = await d.call('POST', '/images', { name: 'x', from: 'docker://Not Valid' });
      expect(bad.status).to.equal(400);
      expect(bad.json.error).to.match(/is not a registry reference/);
    });

    it('answers POST /images/resolve with the reference made whole and its digest, and 400 for what is not a pull', async () => {
      const r = await d.call('POST', '/images/resolve', {
        from: 'docker://python:3.12',
        registry_auth: { username: 'me', password: 'never-shown-77' },
      });
      expect(r.status, r.text).to.equal(200);
      expect(r.json.from).to.equal('docker://docker.io/library/python:3.12');
      expect(r.json.digest).to.match(/^sha256:[a-f0-9]{64}$/);
      for (const [body, why] of [
        [{ from: 'oci-archive:/x.tar' }, /from must be an image in a registry: docker:\/\/REF/],
        [{ from: 'docker://Not Valid' }, /is not a registry reference/],
        [{ from: 'docker://a:1', extra: 1 }, /unknown field "extra"/],
        [{ from: 'docker://a:1', registry_auth: { username: 'me' } }, /registry_auth/],
      ] as const) {
        const bad = await d.call('POST', '/images/resolve', body);
        expect(bad.status, JSON.stringify(body)).to.equal(400);
        expect(bad.json.error).to.match(why);
      }
    });
  });
});
