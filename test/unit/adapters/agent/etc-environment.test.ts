import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { etcEnvironment, parseEtcEnvironment } from '../../../../src/adapters/agent/etc-environment.js';
import { NodeProcessRunner } from '../../../../src/adapters/agent/node-process-runner.js';
import { NodePtyFactory } from '../../../../src/adapters/agent/node-pty-factory.js';
import { tempDir } from '../../../helpers/temp-dirs.js';

describe('adapters/agent/etc-environment: the system-wide environment commands start with', () => {
  it("reads pam_env's lines: quotes dropped, a recipe's escapes undone, other shapes skipped", () => {
    const text = [
      '# comment',
      '',
      'PLAIN=a b',
      'DQ="x \\"y\\" \\$HOME \\\\ \\`z\\`"',
      "SQ='it is'",
      'export EXPORTED=1',
      '  SPACED=2  ',
      'EMPTY=',
      'HALF="open',
      '=nothing',
      '1BAD=x',
      'no equals sign',
      'SAME=first',
      'SAME=second',
    ].join('\n');
    expect(parseEtcEnvironment(text)).to.deep.equal({
      PLAIN: 'a b',
      DQ: 'x "y" $HOME \\ `z`',
      SQ: 'it is',
      EXPORTED: '1',
      SPACED: '2',
      EMPTY: '',
      HALF: '"open',
      SAME: 'second',
    });
  });

  it('reads the file again when it changes, and none when it is missing', () => {
    const file = join(tempDir('svc-etc-env-'), 'environment');
    expect(etcEnvironment(file)).to.deep.equal({});
    writeFileSync(file, 'A=1\n');
    expect(etcEnvironment(file)).to.deep.equal({ A: '1' });
    writeFileSync(file, 'A=1\nB="two"\n');
    expect(etcEnvironment(file)).to.deep.equal({ A: '1', B: 'two' });
  });

  it("is what a command and a shell start with, under the request's own env", async () => {
    const system = () => ({ APP_ENV: 'prod', WHO: 'system' });
    const p = await new NodeProcessRunner(null, system).spawn({
      cmd: 'sh',
      args: ['-c', 'printf "%s/%s" "$APP_ENV" "$WHO"'],
      env: { WHO: 'request' },
    });
    const out: Buffer[] = [];
    p.stdout.on('data', (c: Buffer) => out.push(c));
    await p.exited;
    expect(Buffer.concat(out).toString()).to.equal('prod/request');
    const session = new NodePtyFactory(null, system).open({
      shell: 'sh',
      args: ['-c', 'printf "[%s/%s]" "$APP_ENV" "$WHO"'],
      env: { WHO: 'terminal' },
      cols: 80,
      rows: 24,
    });
    const chunks: Buffer[] = [];
    session.onData((d) => chunks.push(d));
    await new Promise<number>((resolve) => session.onExit(resolve));
    expect(Buffer.concat(chunks).toString()).to.include('[prod/terminal]');
  });
});
