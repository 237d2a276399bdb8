import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { injectable } from 'inversify';
import { InternalError } from '../../domain/errors.js';
import type { GuestEgress, GuestIdentity } from '../../domain/agent.js';
import { applyEgress, resumeEgress } from './egress-trust.js';
import type { SystemIdentity } from '../../ports/agent/system-identity.js';
import { shellWord } from '../process-kit/shell-word.js';
import { KeptShell } from './kept-shell.js';
import { loadSysCalls, type SysCalls } from './sys-calls.js';

/**
 * Sets the clock, the hostname (kernel and /etc/hostname), /etc/hosts, /etc/machine-id and a
 * clone's overlay address of a Linux guest. A guest restored from a saved state answers this call
 * first, and under TCG each path it takes for the first time costs (docs/suspend-and-clones.md),
 * so it takes as few as it can: with the `svc-sys` addon (`sys`), the clock and the kernel's
 * hostname are two system calls and the files plain synchronous writes, all in the agent's process;
 * a restore that keeps its name (the kernel already has it) sets the clock alone. Without the addon,
 * the whole identity is one command line to a shell the agent keeps (KeptShell): redirections and
 * one `date`. An overlay address takes `ip`, in that shell, either way.
 * `toolsDir` holds `date`, `ip` and `sh` where the guest's own PATH may have none (images made from
 * container images carry busybox under /opt/svc/bin); otherwise they are looked up on PATH. `root`
 * is `/` but in tests. The notes directory of the port is not written: the system is the record.
 */
@injectable()
export class LinuxSystemIdentity implements SystemIdentity {
  private readonly shell: KeptShell;

  private readonly renewKeys: (() => void) | undefined;

  private readonly growRoot: ((bytes: number) => Promise<void>) | undefined;

  /**
   * The userdata this agent has started (sha256 of each script). The daemon sends an identity call
   * again when it got no answer in time, though the first may have reached the guest: its userdata
   * runs once. Two runs side by side each wrote their line into one file (a CI run on a loaded host).
   */
  private readonly userdataStarted = new Set<string>();

  /**
   * `renewKeys` makes a clone's SSH host keys anew; by default it runs renewHostKeysScript() on the real
   * root only (a test's root must never reach the host's own keys or daemons). `growRoot` grows
   * the root filesystem once its disk has `bytes` (the same rule: by default on the real root only).
   */
  constructor(
    private readonly toolsDir?: string,
    private readonly root = '/',
    shell?: KeptShell,
    private readonly sys: SysCalls | null = loadSysCalls(),
    renewKeys?: () => void,
    growRoot?: (bytes: number) => Promise<void>,
  ) {
    this.shell = shell ?? new KeptShell(this.tool('sh'));
    this.renewKeys = renewKeys ?? (root === '/' ? () => renewHostKeys(this.tool('sh')) : undefined);
    this.growRoot = growRoot ?? (root === '/' ? (bytes) => this.growVda(bytes) : undefined);
  }

  private tool(name: string): string {
    return this.toolsDir ? join(this.toolsDir, name) : name;
  }

  private at(p: string): string {
    return join(this.root, p);
  }

  /** The command line that applies `id` without the addon; every word quoted. */
  line(id: GuestIdentity): string {
    const q = shellWord;
    const put = (text: string, file: string) => `printf '%s\\n' ${q(text)} > ${q(this.at(file))}`;
    // Best effort, as before: a read-only /etc/hosts or machine-id does not fail the identity.
    const optional = [
      // Without the addon the bytes are mixed in, not credited: the kernel reseeds on its own time.
      ...(id.entropy ? [`printf '%s' ${q(id.entropy)} > ${q(this.at('dev/urandom'))} 2>/dev/null`] : []),
      `${put(`127.0.0.1 localhost ${id.hostname}`, 'etc/hosts')} 2>/dev/null`,
      ...(id.machine_id ? [`${put(id.machine_id, 'etc/machine-id')} 2>/dev/null`] : []),
    ];
    const needed = [
      `${q(this.tool('date'))} -u -s @${Math.floor(id.time_ms / 1000)} >/dev/null`,
      `printf '%s' ${q(id.hostname)} > ${q(this.at('proc/sys/kernel/hostname'))}`,
      put(id.hostname, 'etc/hostname'),
    ];
    return `${optional.join('; ')}; { ${[...needed, ...this.overlay(id)].join(' && ')}; } 2>&1`;
  }

  private overlay(id: GuestIdentity): string[] {
    if (!id.overlay_ip) return [];
    const ip = (...args: string[]) => [shellWord(this.tool('ip')), ...args.map(shellWord)].join(' ');
    return [
      ip('addr', 'flush', 'dev', 'eth1'),
      ip('addr', 'add', id.overlay_ip, 'dev', 'eth1'),
      ip('link', 'set', 'eth1', 'up'),
    ];
  }

  /** `notes` is `<state-dir>/identity`: userdata and its markers go in the state directory beside it. */
  async egress(e: GuestEgress, stateDir: string): Promise<void> {
    applyEgress(e, { stateDir, root: this.root, trustStore: true });
  }

  async resumeEgress(stateDir: string): Promise<void> {
    resumeEgress({ stateDir, root: this.root, trustStore: true });
  }

  async apply(id: GuestIdentity, notes = join(this.root, 'var/lib/svc/identity')): Promise<void> {
    if (!Number.isSafeInteger(Math.floor(id.time_ms / 1000)) || id.time_ms < 0)
      throw new InternalError(`cannot apply the identity: not a time: ${id.time_ms}`);
    if (this.sys) {
      this.applyInProcess(this.sys, id);
      const more = this.overlay(id);
      if (more.length > 0) await this.run(`{ ${more.join(' && ')}; } 2>&1`);
    } else {
      await this.run(this.line(id));
    }
    if (id.disk_bytes !== undefined) await this.growRoot?.(id.disk_bytes);
    if (id.userdata !== undefined) this.startUserdata(id.userdata, dirname(notes));
    // A clone or fork (a new machine id) has its template's SSH host keys until now.
    if (id.machine_id) this.renewKeys?.();
  }

  /**
   * A copy of a snapshot made on a smaller disk: the host has grown the disk (QEMU's block_resize),
   * and the kernel learns it from a config interrupt a moment later. Waits (at most 5 s) to see
   * the new size, then grows the root filesystem (ext4, online) into it, as the boot does.
   */
  private async growVda(bytes: number): Promise<void> {
    const size = () => Number(readFileSync(this.at('sys/block/vda/size'), 'utf8').trim()) * 512;
    for (let i = 0; i < 250 && size() < bytes; i++) await new Promise((r) => setTimeout(r, 20));
    if (size() < bytes) throw new InternalError(`cannot grow the root filesystem: /dev/vda stays at ${size()} bytes`);
    const resize = this.toolsDir ? shellWord(this.tool('resize2fs')) : 'PATH="$PATH:/usr/sbin:/sbin" resize2fs';
    await this.run(`${resize} /dev/vda 2>&1`);
  }

  /**
   * Runs userdata as a boot does (image/debian/.../userdata, rc.sysinit): the script kept in the
   * state directory, its output in /var/log/userdata.log, its status in `userdata-exit` and its
   * end marked by `userdata-ran`, which goes now (a snapshot's boot left one). A script this agent
   * has started already is not started again (userdataStarted).
   */
  private startUserdata(script: string, stateDir: string): void {
    const key = createHash('sha256').update(script).digest('hex');
    if (this.userdataStarted.has(key)) return;
    this.userdataStarted.add(key);
    const file = join(stateDir, 'userdata');
    const ran = join(stateDir, 'userdata-ran');
    const exit = join(stateDir, 'userdata-exit');
    const log = this.at('var/log/userdata.log');
    try {
      rmSync(ran, { force: true });
      rmSync(exit, { force: true });
      mkdirSync(dirname(log), { recursive: true });
      writeFileSync(file, script, { mode: 0o700 });
      chmodSync(file, 0o700);
    } catch (err) {
      throw new InternalError(`cannot write the userdata: ${(err as Error).message}`);
    }
    const q = shellWord;
    const home = this.at('root');
    const line = `cd ${q(home)} 2>/dev/null || cd /; ${q(file)} > ${q(log)} 2>&1; echo $? > ${q(exit)}; : > ${q(ran)}`;
    const child = spawn(this.tool('sh'), ['-c', line], { detached: true, stdio: 'ignore' });
    child.on('error', () => undefined);
    child.unref();
  }

  private applyInProcess(sys: SysCalls, id: GuestIdentity): void {
    const failed = (err: unknown) => new InternalError(`cannot apply the identity: ${(err as Error).message}`);
    try {
      sys.setTime(id.time_ms);
    } catch (err) {
      throw failed(err);
    }
    if (id.entropy) this.reseed(sys, Buffer.from(id.entropy, 'hex'));
    // The same name and no new machine id: a restore of the guest itself, whose files already say so.
    if (id.machine_id === undefined && sys.hostname() === id.hostname) return;
    const put = (file: string, text: string) => writeFileSync(this.at(file), `${text}\n`);
    try {
      put('etc/hosts', `127.0.0.1 localhost ${id.hostname}`);
    } catch {
      /* best effort, as in the shell line */
    }
    if (id.machine_id) {
      try {
        put('etc/machine-id', id.machine_id);
      } catch {
        /* best effort */
      }
    }
    try {
      sys.setHostname(id.hostname);
      put('etc/hostname', id.hostname);
    } catch (err) {
      throw failed(err);
    }
  }

  /**
   * Copies of one saved state hold the same generator state: what the host sent is credited and
   * the generator reseeded (the addon's ioctls), or, with an addon that predates them, mixed in.
   * A failure here fails the identity: a fork that draws its siblings' numbers is not one to hand out.
   */
  private reseed(sys: SysCalls, bytes: Buffer): void {
    try {
      if (sys.reseed) sys.reseed(bytes);
      else writeFileSync(this.at('dev/urandom'), bytes);
    } catch (err) {
      throw new InternalError(`cannot reseed the random generator: ${(err as Error).message}`);
    }
  }

  private async run(line: string): Promise<void> {
    let answer;
    try {
      answer = await this.shell.run(line);
    } catch (err) {
      throw new InternalError(`cannot apply the identity: ${(err as Error).message}`);
    }
    if (answer.status !== 0)
      throw new InternalError(
        `cannot apply the identity: exit ${answer.status}: ${answer.said.join(' ').slice(0, 300)}`,
      );
  }

  /** Ends the kept shell (the agent's shutdown, tests). */
  close(): void {
    this.shell.close();
  }
}

/**
 * Makes a guest's SSH host keys anew (a clone or fork has its template's). OpenSSH's: each type it
 * had, made into a new file that replaces the old one only once whole (a type ssh-keygen cannot make
 * keeps its key), ed25519 and ECDSA when it had none; then its service restarted. The debian image
 * has no RSA key (docs/image.md), whose making took 7 s of a TCG guest's CPU: every restore, clone
 * and fork of it paid that before. dropbear's are removed and its listener (a child of init, which
 * starts it again) ended, so it makes new ones on the first connection (`-R`). It runs detached,
 * after the identity has answered, and sessions that are open stay (each has its own process).
 * With `system` false (a test's folder) it touches neither services nor processes.
 */
export function renewHostKeysScript(sshDir = '/etc/ssh', system = true): string {
  const d = shellWord(sshDir);
  return [
    `if [ -d ${d} ] && command -v ssh-keygen >/dev/null 2>&1; then`,
    `  types=$(for k in ${d}/ssh_host_*_key; do [ -f "$k" ] && { t=\${k##*/ssh_host_}; echo "\${t%_key}"; }; done)`,
    '  for t in ${types:-ed25519 ecdsa}; do',
    `    k=${d}/ssh_host_\${t}_key; rm -f "$k.new" "$k.new.pub"`,
    '    ssh-keygen -q -t "$t" -N "" -f "$k.new" </dev/null >/dev/null 2>&1 && mv -f "$k.new.pub" "$k.pub" && mv -f "$k.new" "$k"',
    '    rm -f "$k.new" "$k.new.pub"',
    '  done',
    ...(system ? ['  systemctl try-restart ssh.service >/dev/null 2>&1'] : []),
    'fi',
    ...(system
      ? [
          'if [ -d /etc/dropbear ]; then',
          '  rm -f /etc/dropbear/dropbear_*_host_key',
          '  for p in $(pidof dropbear); do [ "$(cut -d" " -f4 /proc/$p/stat)" = 1 ] && kill "$p"; done',
          'fi',
        ]
      : []),
  ].join('\n');
}

function renewHostKeys(sh: string): void {
  const child = spawn(sh, ['-c', renewHostKeysScript()], { detached: true, stdio: 'ignore' });
  child.on('error', () => undefined);
  child.unref();
}
