import { expect } from 'chai';
import { copyTarget, homeRelative, parseEndpoint } from '../../../../src/adapters/cli/copy.js';

describe('svc cp: where a copy lands (cp -r and docker cp)', () => {
  const file = (path: string) => ({ path, directory: false });
  const dir = (path: string) => ({ path, directory: true });

  it('a file goes into a directory under its own name, onto anything else as named', () => {
    expect(copyTarget(file('./notes.txt'), { path: '/root', found: 'directory' })).to.equal('/root/notes.txt');
    expect(copyTarget(file('/etc/hostname'), { path: '/tmp/', found: 'directory' })).to.equal('/tmp/hostname');
    expect(copyTarget(file('a.txt'), { path: '/srv/b.txt', found: 'other' })).to.equal('/srv/b.txt');
    expect(copyTarget(file('a.txt'), { path: '/srv/b.txt', found: undefined })).to.equal('/srv/b.txt');
    // a destination ending in / is a directory, made when it is not there
    expect(copyTarget(file('a.txt'), { path: '/srv/new/', found: undefined })).to.equal('/srv/new/a.txt');
  });

  it('a directory goes into an existing one under its own name, or becomes a destination that is not there', () => {
    expect(copyTarget(dir('./site'), { path: '/srv/www', found: 'directory' })).to.equal('/srv/www/site');
    expect(copyTarget(dir('/etc/'), { path: '/tmp/cp', found: 'directory' })).to.equal('/tmp/cp/etc');
    expect(copyTarget(dir('./site'), { path: '/srv/www', found: undefined })).to.equal('/srv/www');
    expect(copyTarget(dir('./site'), { path: '/srv/www/', found: undefined })).to.equal('/srv/www/');
  });

  it('a directory ending in /. (or . itself) gives its contents, into the destination itself', () => {
    expect(copyTarget(dir('./site/.'), { path: '/srv/www', found: 'directory' })).to.equal('/srv/www');
    expect(copyTarget(dir('/etc/./'), { path: '/tmp/cp', found: 'directory' })).to.equal('/tmp/cp');
    expect(copyTarget(dir('.'), { path: '/srv/www', found: 'directory' })).to.equal('/srv/www');
  });

  it('refuses a directory onto something that is not one', () => {
    expect(() => copyTarget(dir('site'), { path: '/srv/file', found: 'other' })).to.throw(
      /\/srv\/file: not a directory/,
    );
  });
});

describe('svc cp: NAME:PATH as scp takes it', () => {
  it('reads NAME:/path, NAME:, NAME:file and NAME:~/file as guest paths, ./a:b as a local one', () => {
    expect(parseEndpoint('web:/srv/a')).to.deep.equal({ vm: 'web', path: '/srv/a' });
    expect(parseEndpoint('web:')).to.deep.equal({ vm: 'web', path: '' });
    expect(parseEndpoint('web:notes.txt')).to.deep.equal({ vm: 'web', path: 'notes.txt' });
    for (const local of ['./web:x', 'Web:/x', 'notes.txt', '/tmp/a:b'])
      expect(parseEndpoint(local)).to.deep.equal({ path: local });
  });

  it('puts a path that is not absolute in the home, as a directory when it names the home itself', () => {
    expect(homeRelative('/etc/hosts', '/root')).to.equal('/etc/hosts');
    expect(homeRelative('notes.txt', '/root')).to.equal('/root/notes.txt');
    expect(homeRelative('~/src/a', '/home/svc/')).to.equal('/home/svc/src/a');
    for (const home of ['', '~']) expect(homeRelative(home, '/root')).to.equal('/root/');
    expect(homeRelative('x', '/')).to.equal('/x');
  });
});
