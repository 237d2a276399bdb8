import { expect } from 'chai';
import type { Command } from 'commander';
import { buildCli } from '../../../../src/adapters/cli/cli.js';

/** Every command of `buildCli()`, by its full name (`fwd rm`), the program itself left out. */
function commands(c: Command, prefix = ''): [string, Command][] {
  return c.commands.flatMap((sub) => {
    const name = `${prefix}${sub.name()}`;
    return [[name, sub] as [string, Command], ...commands(sub, `${name} `)];
  });
}

describe('svc CLI: its help', () => {
  it('says what every command does, and refuses a number flag that is not one by its name', async () => {
    const program = buildCli();
    const all = commands(program);
    expect(all.length).to.be.greaterThan(50);
    const silent = all.filter(([, c]) => !c.description().trim()).map(([n]) => n);
    expect(silent, 'commands without a description').to.deep.equal([]);
    const quiet = { writeErr: () => undefined, writeOut: () => undefined };
    for (const c of [program, ...all.map(([, sub]) => sub)]) c.exitOverride().configureOutput(quiet);
    for (const argv of [
      ['activity', '--limit', 'x'],
      ['egress', 'log', 'v', '--limit', '-1'],
      ['fwd', 'rm', 'v', 'abc'],
      ['mcp', '--max-vms', 'lots'],
    ]) {
      const err = await program.parseAsync(argv, { from: 'user' }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.message, argv.join(' ')).to.match(
        /' is invalid(\. | for argument '\w+'\. )expected a (whole number|host port)/,
      );
    }
  });
});
