import { expect } from 'chai';
import fc from 'fast-check';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import {
  assertProcessRef,
  parseFrom,
  parseOutputStart,
  parseProcessStart,
  parseSignal,
  processState,
  signalName,
  type ProcessInfo,
} from '../../../src/domain/processes.js';

const refused = (f: () => unknown, what: RegExp) => {
  expect(f).to.throw(InvalidArgumentError, what);
};

describe('domain/processes', () => {
  it('takes a process start with every field, and a pty given as true', () => {
    expect(
      parseProcessStart({
        cmd: 'sh',
        args: ['-c', 'x'],
        env: { A: '1' },
        cwd: '/srv',
        user: 'svc',
        tag: 'web-1',
        pty: { cols: 120, rows: 40 },
        stdin: true,
      }),
    ).to.deep.equal({
      cmd: 'sh',
      args: ['-c', 'x'],
      env: { A: '1' },
      cwd: '/srv',
      user: 'svc',
      tag: 'web-1',
      pty: { cols: 120, rows: 40 },
      stdin: true,
    });
    expect(parseProcessStart({ cmd: 'top', pty: true }).pty).to.deep.equal({ cols: 80, rows: 24 });
    expect(parseProcessStart({ cmd: 'id', user: 1000 }).user).to.equal('1000');
  });

  it('refuses what is not a process start, saying which field', () => {
    refused(() => parseProcessStart([]), /JSON object/);
    refused(() => parseProcessStart({}), /cmd must be a string/);
    refused(() => parseProcessStart({ cmd: '' }), /cmd is required/);
    refused(() => parseProcessStart({ cmd: 'x', args: 'y' }), /args must be an array/);
    refused(() => parseProcessStart({ cmd: 'x', args: [1] }), /args\[0\]/);
    refused(() => parseProcessStart({ cmd: 'x\0y' }), /NUL/);
    refused(() => parseProcessStart({ cmd: 'x', env: { 'A=B': '1' } }), /env name/);
    refused(() => parseProcessStart({ cmd: 'x', env: { A: 1 } }), /env.A/);
    refused(() => parseProcessStart({ cmd: 'x', cwd: 'rel' }), /absolute/);
    refused(() => parseProcessStart({ cmd: 'x', user: 'a b' }), /user/);
    refused(() => parseProcessStart({ cmd: 'x', tag: 'p3' }), /tag/);
    refused(() => parseProcessStart({ cmd: 'x', tag: '-x' }), /tag/);
    refused(() => parseProcessStart({ cmd: 'x', pty: { cols: 2000 } }), /pty.cols/);
    refused(() => parseProcessStart({ cmd: 'x', stdin: 'yes' }), /stdin/);
    refused(() => parseProcessStart({ cmd: 'x', nope: 1 }), /unknown field nope/);
    refused(() => parseProcessStart({ cmd: 'x', args: ['a'.repeat(1 << 20)] }), /too long/);
  });

  it('takes a restart policy for a process without a terminal or input, and refuses the rest', () => {
    expect(parseProcessStart({ cmd: 'x', restart: 'on-failure', max_restarts: 5 })).to.deep.equal({
      cmd: 'x',
      args: [],
      restart: 'on-failure',
      max_restarts: 5,
    });
    expect(parseProcessStart({ cmd: 'x', restart: 'always', max_restarts: 0 }).max_restarts).to.equal(0);
    expect(parseProcessStart({ cmd: 'x', restart: 'no' })).to.deep.equal({ cmd: 'x', args: [] });
    refused(() => parseProcessStart({ cmd: 'x', restart: 'unless-stopped' }), /restart must be/);
    refused(() => parseProcessStart({ cmd: 'x', restart: true }), /restart must be/);
    refused(() => parseProcessStart({ cmd: 'x', restart: 'always', pty: true }), /without a terminal/);
    refused(() => parseProcessStart({ cmd: 'x', restart: 'always', stdin: true }), /without a terminal/);
    refused(() => parseProcessStart({ cmd: 'x', max_restarts: 1 }), /needs restart/);
    refused(() => parseProcessStart({ cmd: 'x', restart: 'no', max_restarts: 1 }), /needs restart/);
    for (const n of [-1, 1.5, '3', 1e7])
      refused(() => parseProcessStart({ cmd: 'x', restart: 'always', max_restarts: n }), /max_restarts must be/);
  });

  it('says a state in a few words, with the restarts of a running one', () => {
    const p = { state: 'running' } as ProcessInfo;
    expect(processState(p)).to.equal('running');
    expect(processState({ ...p, restarts: 3 })).to.equal('running (restarts 3)');
    expect(processState({ ...p, state: 'ended', reason: 'exit', exit_code: 2 })).to.equal('exited 2');
    expect(processState({ ...p, state: 'ended', reason: 'signal', signal: 'SIGTERM' })).to.equal('killed (SIGTERM)');
    expect(processState({ ...p, state: 'ended', reason: 'reboot' })).to.equal('ended (reboot)');
  });

  it('never throws anything but InvalidArgument on any input (property)', () => {
    fc.assert(
      fc.property(fc.anything(), (v) => {
        try {
          parseProcessStart(v);
        } catch (err) {
          expect(err).to.be.instanceOf(InvalidArgumentError);
        }
      }),
    );
  });

  it('reads from as one offset or one per stream', () => {
    expect(parseFrom({})).to.deep.equal({});
    expect(parseFrom({ from: '120' })).to.deep.equal({ all: 120 });
    expect(parseFrom({ from: 'stdout:5,stderr:0' })).to.deep.equal({ stdout: 5, stderr: 0 });
    refused(() => parseFrom({ from: 'stdin:3' }), /from must be/);
    refused(() => parseFrom({ from: '-1' }), /from must be/);
    refused(() => parseFrom({ from: ['1', '2'] }), /once/);
  });

  it('reads a tail of lines instead of from, never both', () => {
    expect(parseOutputStart({})).to.deep.equal({ from: {} });
    expect(parseOutputStart({ tail: '0' })).to.deep.equal({ from: {}, tail: 0 });
    expect(parseOutputStart({ tail: '25' })).to.deep.equal({ from: {}, tail: 25 });
    expect(parseOutputStart({ from: 'stdout:5' })).to.deep.equal({ from: { stdout: 5 } });
    refused(() => parseOutputStart({ tail: '5', from: '0' }), /not both/);
    refused(() => parseOutputStart({ tail: '-1' }), /tail must be an integer from 0 to 1000000/);
    refused(() => parseOutputStart({ tail: '1000001' }), /tail must be/);
    refused(() => parseOutputStart({ tail: 'all' }), /tail must be/);
  });

  it('names ids, tags and signals', () => {
    expect(assertProcessRef('p12')).to.equal('p12');
    expect(assertProcessRef('web.1')).to.equal('web.1');
    refused(() => assertProcessRef('../x'), /not a process id or tag/);
    expect(parseSignal('TERM')).to.equal('SIGTERM');
    expect(parseSignal('sigkill')).to.equal('SIGKILL');
    expect(parseSignal(2)).to.equal('SIGINT');
    refused(() => parseSignal('SIGNOPE'), /signal must be one of/);
    refused(() => parseSignal(99), /signal/);
    expect(signalName(15)).to.equal('SIGTERM');
    expect(signalName(64)).to.equal('SIG64');
  });
});
