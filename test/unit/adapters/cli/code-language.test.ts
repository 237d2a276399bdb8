import { expect } from 'chai';
import { cellLanguage } from '../../../../src/adapters/cli/code-commands.js';

describe('svc code: the language a cell is run in', () => {
  it("takes the cell file's ending where no flag says one", () => {
    const seen = ['a.ts', 'dir.v2/b.mts', 'c.js', 'd.cjs', 'run.sh', 'e.bash', 'f.py', 'notes.txt', 'tsfile', '-'].map(
      (f) => cellLanguage({}, f) ?? null,
    );
    expect(seen).to.deep.equal(['ts', 'ts', 'js', 'js', 'bash', 'bash', 'python', null, null, null]);
    expect(cellLanguage({})).to.equal(undefined);
  });

  it('lets a flag win over the ending', () => {
    expect(cellLanguage({ js: true }, 'a.ts')).to.equal('js');
    expect(cellLanguage({ ts: true }, 'a.py')).to.equal('ts');
    expect(cellLanguage({ bash: true }, 'a.js')).to.equal('bash');
  });
});
