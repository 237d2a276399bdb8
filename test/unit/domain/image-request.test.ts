import { expect } from 'chai';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import {
  normalRegistryRef,
  parseImageRequest,
  parseRegistryResolve,
  registryOf,
  repositoryOf,
} from '../../../src/domain/image-request.js';

describe('domain/parseImageRequest', () => {
  it('reads a recipe: base, packages, files (base64, octal mode), env and run lines', () => {
    const r = parseImageRequest({
      name: 'py-tools',
      from: 'debian',
      packages: ['jq', 'python3-venv', 'curl=7.88.1-10+deb12u5'],
      run: ['echo hi > /etc/motd'],
      files: [{ path: '/etc/app.conf', content: Buffer.from('x=1\n').toString('base64'), mode: '0600' }],
      env: { APP_ENV: 'prod' },
    });
    expect(r).to.deep.include({
      kind: 'recipe',
      name: 'py-tools',
      from: 'debian',
      run: ['echo hi > /etc/motd'],
      env: { APP_ENV: 'prod' },
    });
    if (r.kind !== 'recipe') throw new Error('not a recipe');
    expect(r.packages).to.have.length(3);
    expect(r.files[0]).to.deep.include({ path: '/etc/app.conf', mode: 0o600 });
    expect(r.files[0].content.toString()).to.equal('x=1\n');
  });

  it('reads a bake of a vm', () => {
    expect(parseImageRequest({ name: 'web-v1', from_vm: 'web' })).to.deep.equal({
      kind: 'bake',
      name: 'web-v1',
      from_vm: 'web',
      description: undefined,
    });
  });

  it('reads imports: container archives and disks, with an ssh user for a disk', () => {
    expect(parseImageRequest({ name: 'app', from: 'oci-archive:/srv/in/app.tar' })).to.deep.equal({
      kind: 'import',
      name: 'app',
      source: { type: 'oci-archive', path: '/srv/in/app.tar' },
      ssh_user: undefined,
      description: undefined,
    });
    expect(parseImageRequest({ name: 'app', from: 'docker-archive:/a:b.tar' })).to.deep.include({
      source: { type: 'docker-archive', path: '/a:b.tar' },
    });
    expect(
      parseImageRequest({ name: 'cloud', from: 'disk:/srv/in/bookworm.qcow2', ssh_user: 'debian' }),
    ).to.deep.include({
      kind: 'import',
      source: { type: 'disk', path: '/srv/in/bookworm.qcow2' },
      ssh_user: 'debian',
    });
  });

  it('reads a pull from a registry, its reference made whole as Docker reads it, with a login', () => {
    expect(
      parseImageRequest({
        name: 'py',
        from: 'docker://python:3.12',
        registry_auth: { username: 'u', password: 'p:w' },
      }),
    ).to.deep.equal({
      kind: 'import',
      name: 'py',
      source: { type: 'docker', ref: 'docker.io/library/python:3.12', auth: { username: 'u', password: 'p:w' } },
      description: undefined,
    });
    const whole: [string, string][] = [
      ['python', 'docker.io/library/python:latest'],
      ['bitnami/redis:7', 'docker.io/bitnami/redis:7'],
      ['ghcr.io/org/app:1.0', 'ghcr.io/org/app:1.0'],
      ['localhost/app', 'localhost/app:latest'],
      ['127.0.0.1:5000/team/app:v2', '127.0.0.1:5000/team/app:v2'],
      [`alpine@sha256:${'a'.repeat(64)}`, `docker.io/library/alpine@sha256:${'a'.repeat(64)}`],
      [`quay.io/x/y:t@sha256:${'b'.repeat(64)}`, `quay.io/x/y:t@sha256:${'b'.repeat(64)}`],
    ];
    for (const [ref, made] of whole) expect(normalRegistryRef(ref), ref).to.equal(made);
    expect(registryOf('127.0.0.1:5000/team/app:v2')).to.equal('127.0.0.1:5000');
    expect(registryOf(normalRegistryRef('python'))).to.equal('docker.io');
    for (const ref of ['Python', 'a b', 'x:', '/x', 'x//y', 'x@sha256:12', `x:${'t'.repeat(129)}`, '-x', ''])
      expect(() => normalRegistryRef(ref), ref).to.throw(InvalidArgumentError, /not a registry reference/);
  });

  it("reads a disk's URL, with its digest and SSH user; plain HTTP only with the digest", () => {
    const digest = `sha512:${'c'.repeat(128)}`;
    expect(
      parseImageRequest({ name: 'deb', from: 'https://cloud.example.test/d/disk.qcow2', ssh_user: 'debian' }),
    ).to.deep.include({
      kind: 'import',
      source: { type: 'url', url: 'https://cloud.example.test/d/disk.qcow2' },
      ssh_user: 'debian',
    });
    expect(parseImageRequest({ name: 'deb', from: 'http://10.1.2.3:8080/disk.img', digest }).kind).to.equal('import');
    expect(parseImageRequest({ name: 'deb', from: 'HTTP://10.1.2.3/disk.img', digest })).to.deep.include({
      source: { type: 'url', url: 'http://10.1.2.3/disk.img', digest },
    });
  });

  const bad: [string, unknown, RegExp][] = [
    ['a pull with recipe fields', { name: 'x', from: 'docker://x', run: ['true'] }, /belongs to a recipe/],
    ['a pull with an ssh user', { name: 'x', from: 'docker://x', ssh_user: 'root' }, /belongs to a recipe/],
    ['a login without a pull', { name: 'x', from: 'disk:/x.qcow2', registry_auth: {} }, /belongs to a pull/],
    [
      'a login with a line break',
      { name: 'x', from: 'docker://x', registry_auth: { username: 'u', password: 'a\nb' } },
      /registry_auth.password must be a one-line string/,
    ],
    [
      'a login whose user holds a colon',
      { name: 'x', from: 'docker://x', registry_auth: { username: 'u:v', password: 'p' } },
      /may not hold a ":"/,
    ],
    [
      'a login with other fields',
      { name: 'x', from: 'docker://x', registry_auth: { token: 't' } },
      /unknown field "token"/,
    ],
    ['an unknown import type', { name: 'x', from: 'ftp://example/x.tar' }, /unknown source "ftp:"/],
    [
      'a plain-HTTP URL without a digest',
      { name: 'x', from: 'http://example.test/x.qcow2' },
      /^from: http:\/\/example.test is plain HTTP; give the image's digest/,
    ],
    [
      'a digest that is not one',
      { name: 'x', from: 'https://example.test/x.qcow2', digest: 'md5:abc' },
      /digest must be sha256:HEX/,
    ],
    [
      'a URL with a login in it',
      { name: 'x', from: 'https://u:p@example.test/x.qcow2' },
      /without a user or password in it/,
    ],
    ['a URL that is not one', { name: 'x', from: 'https://exa mple/x' }, /is not a URL/],
    ['a URL with recipe fields', { name: 'x', from: 'https://e.test/x', run: ['true'] }, /belongs to a recipe/],
    [
      'a digest without a URL',
      { name: 'x', from: 'disk:/x.qcow2', digest: `sha256:${'a'.repeat(64)}` },
      /digest belongs/,
    ],
    ['a relative import path', { name: 'x', from: 'oci-archive:app.tar' }, /absolute path/],
    ['an import with recipe fields', { name: 'x', from: 'disk:/x.qcow2', packages: ['jq'] }, /belongs to a recipe/],
    ['a bad ssh user', { name: 'x', from: 'disk:/x.qcow2', ssh_user: 'root; id' }, /ssh_user must be a user name/],
    ['an ssh user on a recipe', { name: 'x', from: 'debian', ssh_user: 'debian' }, /belongs to an import/],
    [
      'an ssh user on a bake',
      { name: 'x', from_vm: 'web', ssh_user: 'debian' },
      /ssh_user belongs to a recipe|from_vm bakes/,
    ],
    ['no body', undefined, /must be a JSON object/],
    ['a bad name', { name: 'Bad Name', from: 'debian' }, /name must be an image name/],
    ['the default alias as a name', { name: 'default', from: 'debian' }, /default/],
    ['neither from nor from_vm', { name: 'x' }, /give from/],
    ['from_vm with a recipe field', { name: 'x', from_vm: 'web', packages: ['jq'] }, /belongs to a recipe/],
    ['an unknown field', { name: 'x', from: 'debian', pkgs: [] }, /unknown field "pkgs"/],
    [
      'a package that is not a package name',
      { name: 'x', from: 'debian', packages: ['jq; rm -rf /'] },
      /packages\[0\]/,
    ],
    ['packages that are not a list', { name: 'x', from: 'debian', packages: 'jq' }, /packages must be an array/],
    ['an empty run line', { name: 'x', from: 'debian', run: ['  '] }, /run\[0\]/],
    [
      'a relative file path',
      { name: 'x', from: 'debian', files: [{ path: 'etc/x', content: '' }] },
      /files\[0\]\.path/,
    ],
    [
      'a file path with ..',
      { name: 'x', from: 'debian', files: [{ path: '/etc/../x', content: '' }] },
      /files\[0\]\.path/,
    ],
    [
      'content that is not base64',
      { name: 'x', from: 'debian', files: [{ path: '/x', content: 'not base64!' }] },
      /base64/,
    ],
    ['a bad mode', { name: 'x', from: 'debian', files: [{ path: '/x', content: '', mode: 'rw' }] }, /octal/],
    ['a bad env name', { name: 'x', from: 'debian', env: { 'A-B': '1' } }, /not a variable name/],
    ['a multi-line env value', { name: 'x', from: 'debian', env: { A: '1\n2' } }, /one-line/],
  ];
  for (const [what, body, msg] of bad) {
    it(`refuses ${what}`, () => {
      expect(() => parseImageRequest(body)).to.throw(InvalidArgumentError, msg);
    });
  }
});

describe('domain/parseRegistryResolve', () => {
  it('takes a docker:// reference made whole, with a login, and nothing else', () => {
    expect(parseRegistryResolve({ from: 'docker://python:3.12' })).to.deep.equal({
      type: 'docker',
      ref: 'docker.io/library/python:3.12',
    });
    expect(
      parseRegistryResolve({ from: 'docker://ghcr.io/o/a:1', registry_auth: { username: 'u', password: 'p' } }),
    ).to.deep.equal({ type: 'docker', ref: 'ghcr.io/o/a:1', auth: { username: 'u', password: 'p' } });
    for (const [body, why] of [
      [undefined, /resolve request/],
      [{}, /from must be an image in a registry/],
      [{ from: 'https://x/disk.qcow2' }, /from must be an image in a registry/],
      [{ from: 'docker://A B' }, /not a registry reference/],
      [{ from: 'docker://a:1', digest: 'sha256:00' }, /unknown field "digest"/],
    ] as const) {
      expect(() => parseRegistryResolve(body), JSON.stringify(body)).to.throw(InvalidArgumentError, why);
    }
  });
});

describe('domain/repositoryOf', () => {
  it("drops a whole reference's tag and digest, never a registry's port", () => {
    const d = `sha256:${'a'.repeat(64)}`;
    expect(repositoryOf(normalRegistryRef('python:3.12'))).to.equal('docker.io/library/python');
    expect(repositoryOf(normalRegistryRef(`localhost:5000/team/app@${d}`))).to.equal('localhost:5000/team/app');
    expect(repositoryOf(normalRegistryRef(`localhost:5000/team/app:1@${d}`))).to.equal('localhost:5000/team/app');
    expect(repositoryOf(normalRegistryRef('localhost:5000/app'))).to.equal('localhost:5000/app');
  });
});
