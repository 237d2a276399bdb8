import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { constants, homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import type { SvcClient } from '../client/svc-client.js';
import { collect, Exit } from './cli-kit.js';

/** Where the CLI keeps what is its own: a key it made, and the host keys it pinned. */
export function svcConfigDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'svc');
}

/** The global options a ProxyCommand needs to reach the same daemon (never the token: see docs/cli.md). */
export interface DaemonFlags {
  socket?: string;
  api?: string;
  config?: string;
}

export interface SshSetup {
  alias: string;
  user: string;
  identity: string;
  knownHosts: string;
  proxyCommand: string;
}

/** The key pair `svc ssh` offers: `-i FILE` (its .pub beside it), else the user's own, else one made for svc. */
export function sshIdentity(given: string | undefined, dir = svcConfigDir(), home = homedir()): string {
  if (given) {
    if (!existsSync(given)) throw new Error(`no key file ${given}`);
    if (!existsSync(`${given}.pub`)) throw new Error(`no ${given}.pub beside the key: svc ssh sends the public half`);
    // absolute: ssh and a printed ssh_config read it from anywhere
    return resolve(given);
  }
  for (const n of ['id_ed25519', 'id_ecdsa', 'id_rsa']) {
    const f = join(home, '.ssh', n);
    if (existsSync(f) && existsSync(`${f}.pub`)) return f;
  }
  const own = join(dir, 'id_ed25519');
  if (!existsSync(own) || !existsSync(`${own}.pub`)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const r = spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'svc', '-f', own], {
      stdio: ['ignore', 'ignore', 'pipe'],
      encoding: 'utf8',
    });
    if (r.error) throw new Error(`svc ssh makes a key with ssh-keygen, which is missing: ${NO_SSH}`);
    if (r.status !== 0) throw new Error(`ssh-keygen could not make ${own}: ${r.stderr.trim()}`);
  }
  return own;
}

const NO_SSH = "install OpenSSH's client (apt-get install openssh-client)";

/** A word for sh (ProxyCommand runs in the user's shell), `%` doubled for ssh's own tokens. */
const shellWord = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`).replace(/%/g, '%%');
/** A path in ssh_config: quoted when it has a space. */
const configPath = (s: string) => (/\s/.test(s) ? `"${s}"` : s);

/** This command again, as a ProxyCommand: `svc fwd stdio NAME 22` to the same daemon. */
export function proxyCommand(
  name: string,
  flags: DaemonFlags,
  argv: string[] = process.argv,
  node = process.execPath,
): string {
  const words = [node, argv[1]];
  // paths made absolute: ssh runs the command from wherever it is started
  if (flags.socket) words.push('--socket', resolve(flags.socket));
  if (flags.api) words.push('--api', flags.api);
  if (flags.config) words.push('--config', resolve(flags.config));
  words.push('fwd', 'stdio', name, '22');
  return words.map(shellWord).join(' ');
}

/**
 * Lets the key log in to the VM (through its agent) and pins the VM's host key in svc's own
 * known_hosts under `svc-NAME`, its lines for that alias replaced (a VM made again under the same
 * name has keys of its own).
 */
export async function prepareSsh(
  client: SvcClient,
  name: string,
  o: { user?: string; identity?: string },
  flags: DaemonFlags,
  dir = svcConfigDir(),
): Promise<SshSetup> {
  const identity = sshIdentity(o.identity, dir);
  const publicKey = readFileSync(`${identity}.pub`, 'utf8').trim();
  const r = await client.sshAuthorize(name, { public_key: publicKey, user: o.user });
  const alias = `svc-${name}`;
  const knownHosts = join(dir, 'known_hosts');
  mkdirSync(dirname(knownHosts), { recursive: true, mode: 0o700 });
  const kept = existsSync(knownHosts)
    ? readFileSync(knownHosts, 'utf8')
        .split('\n')
        .filter((l) => l && l.split(' ')[0] !== alias)
    : [];
  await writeFileAtomic(knownHosts, [...kept, ...r.host_keys.map((k) => `${alias} ${k}`)].join('\n') + '\n', 0o600);
  return { alias, user: r.user, identity, knownHosts, proxyCommand: proxyCommand(name, flags) };
}

/** `-o` options that make ssh reach the VM through svc and check its key against the pinned one. */
export function sshOptions(s: SshSetup): string[] {
  return [
    `ProxyCommand=${s.proxyCommand}`,
    `HostKeyAlias=${s.alias}`,
    `UserKnownHostsFile=${s.knownHosts}`,
    'StrictHostKeyChecking=yes',
    `IdentityFile=${s.identity}`,
    'IdentitiesOnly=yes',
    `User=${s.user}`,
  ];
}

/** What `svc ssh` passes on to ssh of its own flags: forwards, agent forwarding, a terminal, -o options. */
export interface SshPassThrough {
  local?: string[];
  remote?: string[];
  forwardAgent?: boolean;
  tty?: boolean;
  sshOption?: string[];
}

/**
 * ssh's arguments for a session: svc's own `-o` options first, since ssh takes the first value it
 * reads of an option (a `-o StrictHostKeyChecking=no` given to `svc ssh` does not unpin the key),
 * then what the user passed on, then the host and the command.
 */
export function sshArgs(s: SshSetup, p: SshPassThrough, cmd: string[]): string[] {
  return [
    ...sshOptions(s).flatMap((x) => ['-o', x]),
    ...(p.local ?? []).flatMap((x) => ['-L', x]),
    ...(p.remote ?? []).flatMap((x) => ['-R', x]),
    ...(p.forwardAgent ? ['-A'] : []),
    ...(p.tty ? ['-t'] : []),
    ...(p.sshOption ?? []).flatMap((x) => ['-o', x]),
    '--',
    s.alias,
    ...cmd,
  ];
}

/** A `Host` block for ~/.ssh/config (or `ssh -F`): the same options, for ssh, scp, rsync, editors. */
export function sshConfigBlock(s: SshSetup): string {
  return [
    `Host ${s.alias}`,
    `  User ${s.user}`,
    `  ProxyCommand ${s.proxyCommand}`,
    `  HostKeyAlias ${s.alias}`,
    `  UserKnownHostsFile ${configPath(s.knownHosts)}`,
    '  StrictHostKeyChecking yes',
    `  IdentityFile ${configPath(s.identity)}`,
    '  IdentitiesOnly yes',
    '',
  ].join('\n');
}

/** `svc ssh` and `svc ssh-config`: OpenSSH's own client into a VM, its host key pinned. */
export function sshCommands(program: Command, client: () => SvcClient, flags: () => DaemonFlags): void {
  program
    .command('ssh')
    .argument('<name>')
    .argument('[cmd...]', 'a command to run instead of a login shell (after --)')
    .option('-u, --user <user>', 'the user of the guest to log in as (default root)')
    .option(
      '-i, --identity <file>',
      'the private key to use (its .pub beside it); default ~/.ssh/id_*, else one svc makes',
    )
    .option(
      '-L, --local <spec>',
      "ssh's -L: a local port forwarded into the guest, [bind:]port:host:hostport (repeatable)",
      collect,
      [],
    )
    .option('-R, --remote <spec>', "ssh's -R: a guest port forwarded back here (repeatable)", collect, [])
    .option('-A, --forward-agent', "ssh's -A: your ssh-agent reachable from the guest")
    .option('-t, --tty', "ssh's -t: a terminal for a command (svc ssh -t web -- top)")
    .option('-o, --ssh-option <option>', "an ssh -o option, after svc's own (which win) (repeatable)", collect, [])
    .description("log in with OpenSSH's ssh: your key added for the user, the VM's host key pinned (docs/cli.md)")
    .action(async (name: string, cmd: string[], o) => {
      const s = await prepareSsh(client(), name, o, flags());
      const env = { ...process.env };
      const token = program.opts<{ token?: string }>().token;
      if (token) env.SVC_TOKEN = token; // to the ProxyCommand, not onto its command line
      const args = sshArgs(s, o, cmd);
      const child = spawn('ssh', args, { stdio: 'inherit', env });
      // Ctrl-C in a session without a terminal is ssh's to act on: this process waits for its end.
      const ignore = () => undefined;
      process.on('SIGINT', ignore);
      const code = await new Promise<number>((resolve, reject) => {
        child.once('error', (err: NodeJS.ErrnoException) =>
          reject(err.code === 'ENOENT' ? new Error(`svc ssh runs ssh, which is missing: ${NO_SSH}`) : err),
        );
        child.once('exit', (c, sig) => resolve(c ?? 128 + (sig ? constants.signals[sig] : 0)));
      }).finally(() => process.off('SIGINT', ignore));
      throw new Exit(code);
    });

  program
    .command('ssh-config')
    .argument('<name>')
    .option('-u, --user <user>', 'the user of the guest to log in as (default root)')
    .option(
      '-i, --identity <file>',
      'the private key to use (its .pub beside it); default ~/.ssh/id_*, else one svc makes',
    )
    .description(
      'print a Host block for ~/.ssh/config (ssh, scp, rsync, editors reach the VM as svc-NAME): svc ssh-config web >> ~/.ssh/config',
    )
    .action(async (name: string, o) => {
      process.stdout.write(sshConfigBlock(await prepareSsh(client(), name, o, flags())));
    });
}
