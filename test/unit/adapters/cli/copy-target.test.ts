import { expect } from 'chai';
import { copyTarget } from '../../../../src/adapters/cli/copy.js';

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
