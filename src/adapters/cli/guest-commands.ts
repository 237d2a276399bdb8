import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { parseGuestPort } from '../../domain/agent.js';
import { SvcError, type SvcClient } from '../client/svc-client.js';
import { print, readStdin, whole } from './cli-kit.js';
import { table } from './format.js';

/** `svc fs ls|stat|mkdir|rm|ln`: files in a VM, through its agent. */
export function guestFileCommands(program: Command, client: () => SvcClient): void {
  const fs = program.command('fs').description('guest filesystem operations');
  fs.command('ls')
    .argument('<name>')
    .argument('<path>')
    .option('--json')
    .description("a folder's entries in the VM")
    .action(async (name: string, path: string, o) => {
      const list = await client().readdir(name, path);
      print(o.json, list, () =>
        table(
          list.map((e) => [e.mode, e.type, e.size, e.mtime, e.target ? `${e.name} -> ${e.target}` : e.name]),
          ['MODE', 'TYPE', 'SIZE', 'MTIME', 'NAME'],
        ),
      );
    });
  fs.command('stat')
    .argument('<name>')
    .argument('<path>')
    .option('--json')
    .description("a path's type, size, mode and modification time in the VM (a link's own, not its target's)")
    .action(async (name: string, path: string, o) => {
      const e = await client().stat(name, path);
      print(o.json, e, () =>
        table(
          [[e.path, e.type, e.size, e.mode, e.mtime, e.target]],
          ['PATH', 'TYPE', 'SIZE', 'MODE', 'MTIME', 'TARGET'],
        ),
      );
    });
  fs.command('mkdir')
    .argument('<name>')
    .argument('<path>')
    .option('-p, --parents', 'make missing parents too; no error if it exists')
    .option('--mode <octal>')
    .description('make a folder in the VM')
    .action(async (name: string, path: string, o) =>
      client().mkdir(name, path, { recursive: !!o.parents, mode: o.mode }),
    );
  fs.command('rm')
    .argument('<name>')
    .argument('<path>')
    .option('-r, --recursive', 'a folder and everything in it')
    .description('remove a file or an empty folder in the VM')
    .action(async (name: string, path: string, o) =>
      client()
        .remove(name, path, { recursive: !!o.recursive })
        .catch((err: unknown) => {
          // the API's answer names its query parameter; here the option is -r
          if (err instanceof SvcError && err.status === 409 && /directory not empty/.test(err.message))
            throw new Error(`${path}: directory not empty (svc fs rm -r removes it and everything in it)`);
          throw err;
        }),
    );
  fs.command('ln')
    .argument('<name>')
    .argument('<target>')
    .argument('<path>')
    .description('make PATH a symlink to TARGET')
    .action(async (name: string, target: string, path: string) => client().symlink(name, path, target));
}

/** `svc fwd ls|add|rm|stdio`: a VM's live port forwards, and a port reached through its agent. */
export function forwardCommands(program: Command, client: () => SvcClient): void {
  const fwd = program.command('fwd').description('live port forwards');
  fwd
    .command('ls')
    .argument('<name>')
    .option('--json')
    .description("a VM's port forwards")
    .action(async (name: string, o) => {
      const f = (await client().get(name)).forwards;
      print(o.json, f, () =>
        table(
          f.map((x) => [x.host_port, x.guest_port, x.proto, x.kind, x.pid]),
          ['HOST', 'GUEST', 'PROTO', 'KIND', 'PID'],
        ),
      );
    });
  fwd
    .command('add')
    .argument('<name>')
    .argument('<[host:]guest>')
    .option('--json')
    .description('forward a host port on 127.0.0.1 (any free one when left out) to a port in the VM, live')
    .action(async (name: string, spec: string, o) => {
      const m = /^(?:(\d+):)?(\d+)$/.exec(spec);
      if (!m) throw new Error(`fwd add: use [host:]guest, got ${spec}`);
      const f = await client().addForward(name, { host_port: m[1] ? Number(m[1]) : 0, guest_port: Number(m[2]) });
      print(o.json, f, () => `127.0.0.1:${f.host_port} -> ${name}:${f.guest_port}`);
    });
  fwd
    .command('rm')
    .argument('<name>')
    .argument('<hostPort>', 'the host port of the forward', whole('a host port number'))
    .description("remove a VM's port forward, live")
    .action(async (name: string, hp: number) => console.log((await client().removeForward(name, hp)).message));
  fwd
    .command('stdio')
    .argument('<name>')
    .argument('<port>', "a TCP port on the VM's loopback")
    .description(
      "this command's stdin and stdout to a TCP port in the VM, through its agent (no SSH, no host port): an SSH ProxyCommand (-o ProxyCommand='svc fwd stdio NAME 22'), a client of a database in the VM. Ends when the port's side closes",
    )
    .action(async (name: string, port: string) => {
      const s = await client().openPort(name, parseGuestPort(port));
      await new Promise<void>((resolve, reject) => {
        // As nc: the end of stdin does not end the connection; the other side's close does.
        process.stdin.pipe(s, { end: false });
        s.pipe(process.stdout);
        s.once('error', reject);
        s.once('close', () => {
          process.stdin.unpipe(s);
          process.stdin.pause();
          resolve();
        });
      });
    });
}

/** `svc secret ls|set|rm|inject`: the host's secrets and their copies in VMs. */
export function secretCommands(program: Command, client: () => SvcClient): void {
  const secret = program.command('secret').description('host secrets');
  secret
    .command('ls')
    .option('--json')
    .description("the host's secrets: names, sizes and modes, never values")
    .action(async (o) => {
      const s = await client().listSecrets();
      print(o.json, s, () =>
        table(
          s.map((x) => [x.name, x.size, x.mode, x.updated_at]),
          ['NAME', 'SIZE', 'MODE', 'UPDATED'],
        ),
      );
    });
  secret
    .command('set')
    .argument('<name>')
    .option('--file <path>', 'read the value from a file (default: standard input)')
    .option('--mode <octal>')
    .description('create or replace a secret; the value comes from --file or stdin, never from argv')
    .action(async (name: string, o) => {
      const value = o.file ? readFileSync(o.file) : await readStdin();
      const r = await client().setSecret({ name, data_base64: value.toString('base64'), mode: o.mode });
      console.log(`secret ${r.name} set (${r.size} bytes, mode ${r.mode})`);
    });
  secret
    .command('rm')
    .argument('<name>')
    .description('delete a host secret')
    .action(async (name: string) => console.log((await client().deleteSecret(name)).message));
  secret
    .command('inject')
    .argument('<vm>')
    .argument('<secret>')
    .option('--path <guestPath>')
    .option('--mode <octal>')
    .option('--json')
    .description("write a host secret into a file in the VM (default /run/svc/secrets/SECRET, the secret's mode)")
    .action(async (vm: string, s: string, o) => {
      const r = await client().injectSecret(vm, s, { path: o.path, mode: o.mode });
      print(o.json, r, () => `${r.secret} -> ${vm}:${r.path} (${r.mode})`);
    });
}
