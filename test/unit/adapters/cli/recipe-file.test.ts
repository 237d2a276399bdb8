import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readRecipe } from '../../../../src/adapters/cli/recipe-file.js';
import { tempDir } from '../../../helpers/temp-dirs.js';

describe('recipe files (svc image build -f)', () => {
  const dir = tempDir('svc-recipe-');
  const file = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };

  it('reads YAML as the API body: content as text, source as a local file beside the recipe', () => {
    writeFileSync(join(dir, 'app.json'), Buffer.from([0x7b, 0x7d, 0x0a, 0xff]));
    const r = readRecipe(
      file(
        'r.yaml',
        [
          'from: debian',
          'packages: [jq, python3-venv]',
          'env: {APP_ENV: prod, N: 7}',
          'files:',
          '  - {path: /etc/app.json, source: app.json, mode: "0640"}',
          '  - path: /etc/motd',
          '    content: |',
          '      hello',
          'run:',
          '  - python3 -m venv /opt/venv',
          'description: a web image',
        ].join('\n'),
      ),
    );
    expect(r).to.deep.equal({
      from: 'debian',
      packages: ['jq', 'python3-venv'],
      run: ['python3 -m venv /opt/venv'],
      env: { APP_ENV: 'prod', N: '7' },
      files: [
        { path: '/etc/app.json', content: Buffer.from([0x7b, 0x7d, 0x0a, 0xff]).toString('base64'), mode: '0640' },
        { path: '/etc/motd', content: Buffer.from('hello\n').toString('base64'), mode: '0644' },
      ],
      description: 'a web image',
    });
  });

  it('reads JSON, and an empty recipe as nothing but its defaults', () => {
    expect(readRecipe(file('r.json', '{"from": "minimal", "run": ["true"]}'))).to.include({ from: 'minimal' });
    expect(readRecipe(file('empty.yaml', 'packages:\nrun:\n'))).to.deep.equal({
      from: undefined,
      packages: [],
      run: [],
      files: [],
      env: {},
      description: undefined,
    });
  });

  it('names the file and the field of each mistake', () => {
    const refused = (text: string, want: RegExp) => expect(() => readRecipe(file('bad.yaml', text))).to.throw(want);
    refused('- a\n- b\n', /bad\.yaml: a recipe is a mapping of from, packages/);
    refused('from: [debian\n', /bad\.yaml: /);
    refused('from: debian\nname: x\n', /unknown field "name"/);
    refused('packages: jq\n', /packages must be a list/);
    refused('run: [{a: 1}]\n', /run\[0\] must be text/);
    refused('env: [A=1]\n', /env must be a mapping of NAME: value/);
    refused('files: {path: /x}\n', /files must be a list/);
    refused('files: [{path: /x}]\n', /files\[0\]: give content \(its text\) or source \(a local file\), one of them/);
    refused('files: [{path: /x, content: a, source: b}]\n', /one of them/);
    refused('files: [{path: /x, content: a, owner: root}]\n', /files\[0\]: unknown field "owner"/);
    refused('files: [{content: a}]\n', /files\[0\]\.path must be the file's path in the guest/);
    refused('files: [{path: /x, content: a, mode: 0640}]\n', /files\[0\]\.mode: write it quoted/);
    refused('files: [{path: /x, source: nowhere}]\n', /files\[0\]\.source: .*nowhere is not a file/);
    refused('files: [{path: /x, source: .}]\n', /is not a file/);
    expect(() => readRecipe(join(dir, 'missing.yaml'))).to.throw(/missing\.yaml: ENOENT/);
  });
});
