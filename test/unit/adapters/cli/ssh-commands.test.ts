import { expect } from 'chai';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { generateEd25519 } from '../../../../src/adapters/ssh/keygen.js';
import type { SvcClient } from '../../../../src/adapters/client/svc-client.js';
import {
  prepareSsh,
  proxyCommand,
  sshConfigBlock,
  sshIdentity,
  sshArgs,
  sshOptions,
  svcConfigDir,
} from '../../../../src/adapters/cli/ssh-commands.js';
import { tempDir } from '../../../helpers/temp-dirs.js';

describe('svc CLI: svc ssh and svc ssh-config', () => {
  it('runs this CLI again as the ProxyCommand, to the same daemon, quoted for the shell and for ssh', () => {
    const argv = ['node', '/opt/svc/dist/src/bin/svc.js'];
    expect(proxyCommand('web', {}, argv, '/usr/bin/node')).to.equal(
      '/usr/bin/node /opt/svc/dist/src/bin/svc.js fwd stdio web 22',
    );
    expect(
      proxyCommand('web', { socket: '/run/my svc/svc.sock', api: 'http://10.0.0.5:7474', config: '/etc/svc.yaml' }, [
        'node',
        "/home/o'neil/100%/svc.js",
      ]),
    ).to.equal(
      `${process.execPath} '/home/o'\\''neil/100%%/svc.js' --socket '/run/my svc/svc.sock' --api http://10.0.0.5:7474 --config /etc/svc.yaml fwd stdio web 22`,
    );
    // a relative socket or config is made absolute: ssh starts the command from anywhere
    expect(proxyCommand('web', { socket: 'svc.sock' }, argv, 'node')).to.contain(
      `--socket ${join(process.cwd(), 'svc.sock')} `,
    );
  });

  it('offers -i, else the first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa with its .pub, else a key it makes once', () => {
    const home = tempDir('svc-ssh-home');
    const dir = join(home, '.config', 'svc');
    const key = (f: string, pub = true) => {
      mkdirSync(join(home, '.ssh'), { recursive: true });
      writeFileSync(join(home, '.ssh', f), 'private');
      if (pub) writeFileSync(join(home, '.ssh', `${f}.pub`), 'public');
      return join(home, '.ssh', f);
    };
    const made = sshIdentity(undefined, dir, home);
    expect(made).to.equal(join(dir, 'id_ed25519'));
    expect(readFileSync(`${made}.pub`, 'utf8')).to.match(/^ssh-ed25519 \S+ svc\n$/);
    expect(statSync(made).mode & 0o777).to.equal(0o600);
    const again = readFileSync(made, 'utf8');
    expect(sshIdentity(undefined, dir, home)).to.equal(made);
    expect(readFileSync(made, 'utf8')).to.equal(again);
    const rsa = key('id_rsa');
    expect(sshIdentity(undefined, dir, home)).to.equal(rsa);
    key('id_ed25519', false);
    expect(sshIdentity(undefined, dir, home), 'a key without its .pub is passed over').to.equal(rsa);
    const ed = key('id_ed25519');
    expect(sshIdentity(undefined, dir, home)).to.equal(ed);
    expect(sshIdentity(rsa, dir, home)).to.equal(rsa);
    const cwd = process.cwd();
    try {
      process.chdir(join(home, '.ssh'));
      expect(sshIdentity('id_rsa', dir, home), 'made absolute').to.equal(rsa);
    } finally {
      process.chdir(cwd);
    }
    expect(() => sshIdentity(join(home, 'none'), dir, home)).to.throw(/no key file/);
    const lone = join(home, 'lone');
    writeFileSync(lone, 'private');
    expect(() => sshIdentity(lone, dir, home)).to.throw(/no .*lone\.pub beside the key/);
  });

  it("sends the key's .pub, pins the host key under svc-NAME in its own known_hosts, and leaves other VMs' lines", async () => {
    const home = tempDir('svc-ssh-pin');
    const dir = join(home, 'cfg');
    const identity = join(home, 'id');
    const kp = generateEd25519('me');
    writeFileSync(identity, kp.private);
    writeFileSync(`${identity}.pub`, kp.public);
    mkdirSync(dir);
    writeFileSync(join(dir, 'known_hosts'), 'svc-db ssh-ed25519 AAAA-db\nsvc-web ssh-ed25519 AAAA-old\n');
    const asked: unknown[] = [];
    const client = {
      sshAuthorize: async (name: string, r: unknown) => {
        asked.push([name, r]);
        return { user: 'svc', added: true, host_keys: ['ssh-ed25519 AAAA-new'] };
      },
    } as unknown as SvcClient;
    const s = await prepareSsh(client, 'web', { user: 'svc', identity }, { socket: '/s.sock' }, dir);
    expect(asked).to.deep.equal([['web', { public_key: kp.public.trim(), user: 'svc' }]]);
    expect(readFileSync(join(dir, 'known_hosts'), 'utf8')).to.equal(
      'svc-db ssh-ed25519 AAAA-db\nsvc-web ssh-ed25519 AAAA-new\n',
    );
    expect(s).to.deep.include({ alias: 'svc-web', user: 'svc', identity, knownHosts: join(dir, 'known_hosts') });
    expect(s.proxyCommand).to.match(/ --socket \/s\.sock fwd stdio web 22$/);
    expect(sshOptions(s)).to.include.members([
      'HostKeyAlias=svc-web',
      'StrictHostKeyChecking=yes',
      'IdentitiesOnly=yes',
      `IdentityFile=${identity}`,
      'User=svc',
    ]);
    // what the user passes on comes after svc's own -o options (ssh keeps the first value it reads)
    const args = sshArgs(
      s,
      {
        local: ['8080:localhost:80'],
        remote: ['9000:localhost:9000'],
        forwardAgent: true,
        tty: true,
        sshOption: ['StrictHostKeyChecking=no'],
      },
      ['top', '-b'],
    );
    const pinned = args.indexOf('StrictHostKeyChecking=yes');
    expect(pinned).to.be.above(0);
    expect(args.slice(pinned + 1)).to.deep.equal([
      ...['-o', `IdentityFile=${identity}`, '-o', 'IdentitiesOnly=yes', '-o', 'User=svc'],
      ...['-L', '8080:localhost:80', '-R', '9000:localhost:9000', '-A', '-t', '-o', 'StrictHostKeyChecking=no'],
      ...['--', 'svc-web', 'top', '-b'],
    ]);
    expect(sshArgs(s, {}, []).slice(-2)).to.deep.equal(['--', 'svc-web']);
    expect(sshConfigBlock({ ...s, knownHosts: '/a b/known_hosts' }).split('\n')).to.deep.equal([
      'Host svc-web',
      '  User svc',
      `  ProxyCommand ${s.proxyCommand}`,
      '  HostKeyAlias svc-web',
      '  UserKnownHostsFile "/a b/known_hosts"',
      '  StrictHostKeyChecking yes',
      `  IdentityFile ${identity}`,
      '  IdentitiesOnly yes',
      '',
    ]);
  });

  it('keeps what is its own under XDG_CONFIG_HOME, else ~/.config', () => {
    expect(svcConfigDir({ XDG_CONFIG_HOME: '/x' })).to.equal('/x/svc');
    expect(svcConfigDir({})).to.match(/\/\.config\/svc$/);
  });
});
