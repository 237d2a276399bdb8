import { expect } from 'chai';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { parse } from 'node:querystring';
import {
  formatExecQuery,
  formatShellQuery,
  parseExecQuery,
  parseShellQuery,
  queryOf,
} from '../../../src/domain/query.js';
import type { ExecRequest, TerminalRequest } from '../../../src/domain/agent.js';

describe('domain/query: the exec query', () => {
  it('takes a user of the guest by name or number, with a gid but not with a uid', () => {
    expect(parseExecQuery({ cmd: 'id', user: 'svc' })).to.deep.include({ cmd: 'id', args: [], user: 'svc' });
    expect(parseExecQuery({ cmd: 'id', user: '1000', gid: '0' })).to.deep.include({ user: '1000', gid: 0 });
    expect(parseExecQuery({ cmd: 'id', uid: '1000' })).to.not.have.property('user');
    expect(() => parseExecQuery({ cmd: 'id', user: 'svc', uid: '1000' }))
      .to.throw(InvalidArgumentError)
      .with.property('message', 'give user or uid, not both');
  });

  it('refuses a user that is no user name, saying what was given', () => {
    for (const bad of ['a b', '../x', 'root;id', '-u', 'x'.repeat(40)])
      expect(() => parseExecQuery({ cmd: 'id', user: bad }), bad)
        .to.throw(InvalidArgumentError)
        .with.property('message')
        .that.matches(/^user must be a user name or number, got "/);
    expect(() => parseExecQuery({ cmd: 'id', user: ['a', 'b'] })).to.throw(/user must be given once/);
  });

  it('takes env as repeated NAME=VALUE, a value with = and newlines whole, the last of a name twice', () => {
    const r = parseExecQuery({ cmd: 'env', env: ['A=1', 'URL=http://x/?a=b&c=d', 'EMPTY=', 'ML=one\ntwo', 'A=2'] });
    expect(r.env).to.deep.equal({ A: '2', URL: 'http://x/?a=b&c=d', EMPTY: '', ML: 'one\ntwo' });
    expect(parseExecQuery({ cmd: 'env' })).to.not.have.property('env');
  });

  it('refuses env that is not NAME=VALUE, a name a shell would not take, NUL, and more than 256', () => {
    const bad: [unknown, RegExp][] = [
      ['NOEQUALS', /^env must be NAME=VALUE, got "NOEQUALS"$/],
      ['=x', /^env name "" is not valid$/],
      ['1A=x', /^env name "1A" is not valid$/],
      ['A-B=x', /^env name "A-B" is not valid$/],
      ['A=x\0y', /^env A must not contain NUL$/],
      [Array.from({ length: 257 }, (_, i) => `V${i}=x`), /^at most 256 env variables$/],
    ];
    for (const [env, message] of bad)
      expect(() => parseExecQuery({ cmd: 'env', env }), String(env).slice(0, 20))
        .to.throw(InvalidArgumentError)
        .with.property('message')
        .that.matches(message);
  });

  it('reads back every field formatExecQuery writes (what the client and the daemon send)', () => {
    const req: ExecRequest = {
      cmd: 'sh',
      args: ['-c', 'echo "$A" && exit 3', 'a&b=c', ''],
      cwd: '/tmp/a b',
      user: 'svc',
      gid: 7,
      timeoutMs: 90_000,
      encoding: 'base64',
      env: { A: 'x=y&z', B: 'ünï\ncode', C: '' },
    };
    for (const buffered of [true, false])
      expect(parseExecQuery(parse(formatExecQuery(req, buffered).toString()))).to.deep.equal({
        ...req,
        uid: undefined,
        buffered,
      });
    const plain = parseExecQuery(parse(formatExecQuery({ cmd: 'true', args: [] }, true).toString()));
    expect(plain).to.deep.equal({ cmd: 'true', args: [], buffered: true, uid: undefined, gid: undefined });
  });
});

describe('domain/query: the shell query', () => {
  it('reads back every field formatShellQuery writes, repeated args and env included', () => {
    const asked: TerminalRequest[] = [
      { cols: 120, rows: 40, shell: '/bin/bash', user: 'svc', cwd: '/srv', env: { A: '1' } },
      { cmd: 'python3', args: ['-c', 'print(1)', ''], env: { A: 'x=y', B: '' }, cwd: '/tmp/a b' },
      { cmd: 'top', args: [] },
      {},
    ];
    for (const t of asked) expect(parseShellQuery(queryOf(formatShellQuery(t)))).to.deep.equal(t);
  });

  it('keeps one value of a key given once and every value of one given twice', () => {
    expect(queryOf(new URLSearchParams('a=1&b=2&b=3&c='))).to.deep.equal({ a: '1', b: ['2', '3'], c: '' });
  });
});
