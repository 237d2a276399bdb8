import { expect } from 'chai';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { lastFigure } from '../../../../src/adapters/cli/code-commands.js';

describe('svc code --figures: where a run numbers its figures from', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'svc-figures-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('makes the folder and starts at 1 in one that has no figure', async () => {
    const made = join(dir, 'out', 'plots');
    expect(await lastFigure(made)).to.equal(0);
    expect(readdirSync(made)).to.deep.equal([]);
  });

  it('goes on after the highest figure-N.png there, whatever else the folder holds', async () => {
    for (const name of [
      'figure-2.png',
      'figure-10.png',
      'figure-3.png',
      'figure-99.txt',
      'figure-0.png',
      'notes.png',
      'figure-07.png',
    ])
      writeFileSync(join(dir, name), '');
    expect(await lastFigure(dir)).to.equal(10);
  });
});
