import { expect } from 'chai';
import { commandNotFound, isCommandNotFound } from '../../../src/domain/agent.js';

describe('agent: a command the guest lacks', () => {
  it('names it, by PATH or as a path', () => {
    expect(commandNotFound('jq')).to.equal("no command jq in the guest's PATH");
    expect(commandNotFound('/opt/x/run')).to.equal('no program /opt/x/run in the guest');
  });

  it("says what to do with a shell's own command or a whole shell line as one word", () => {
    for (const cmd of ['cd', 'export', 'source'])
      expect(commandNotFound(cmd)).to.equal(
        `no command ${cmd} in the guest's PATH (${cmd} is part of the shell: run it in one, sh -c '${cmd} ...')`,
      );
    for (const cmd of ['echo $HOME', 'ls|wc -l', 'a;b', 'make && make install', "it's"])
      expect(commandNotFound(cmd)).to.match(/ \(a shell line\? run it in a shell: sh -c '\.\.\.'\)$/);
    // a program named with dashes, dots, pluses and digits is only a name
    expect(commandNotFound('g++-12.2')).to.equal("no command g++-12.2 in the guest's PATH");
  });

  it('knows its own text again (the CLI turns a terminal that says so into exit 127), and no other', () => {
    for (const cmd of ['jq', '/opt/x/run', 'cd', 'ls | wc -l'])
      expect(isCommandNotFound(commandNotFound(cmd))).to.equal(true);
    expect(isCommandNotFound('no directory /srv in the guest')).to.equal(false);
  });
});
