import { expect } from 'chai';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { expectShellFollowsResize, inTerminal, runSvc, SHELL_SIZE, SVC, type CliRun } from '../helpers/svc-cli.js';
import { ensureImage, qemuProcesses } from './image.js';

/**
 * What a new user meets first, on real guests. Boots that cannot succeed fail fast and say why:
 * too little memory is refused at once; a kernel that panics (a test image whose command line
 * leaves it nothing to run) and a guest that hangs (one whose root disk is not there: its
 * initramfs says so and waits in a shell) end the create within seconds with the console's last
 * lines, not at the agent's timeout. Then the CLI as a subprocess and in a real terminal.
 */
describe('svcd with QEMU: a boot that fails says why, fast; the CLI in a terminal', function () {
  this.timeout(180_000);
  let d: TestDaemon;
  let env: NodeJS.ProcessEnv;
  const svc = (args: string[], input?: string): Promise<CliRun> => runSvc(env, args, input);

  before(async () => {
    const built = join(ensureImage(), 'minimal');
    const images = tempDir('svc-e2e-panics-');
    chmodSync(images, 0o755);
    symlinkSync(built, join(images, 'minimal'));
    // The minimal image with command lines that leave the kernel nothing to run (it panics) or no
    // root disk (the initramfs says so and waits in a shell on the console: it hangs).
    const variant = (name: string, cmdline: string, description: string) => {
      const dir = join(images, name);
      mkdirSync(dir);
      chmodSync(dir, 0o755);
      for (const f of ['vmlinux', 'initrd.img', 'disk.qcow2']) symlinkSync(join(built, f), join(dir, f));
      const m = JSON.parse(readFileSync(join(built, 'manifest.json'), 'utf8')) as Record<string, unknown>;
      writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ ...m, cmdline, description }));
    };
    variant(
      'panics',
      'console=ttyS0 rdinit=/nonexistent root=/dev/nonexistent rw quiet loglevel=3 panic=-1',
      'a kernel that panics (test)',
    );
    variant('hangs', 'console=ttyS0 root=/dev/nonexistent rw quiet loglevel=3 panic=-1', 'a guest that hangs (test)');
    d = await startTestDaemon({
      hypervisor: 'qemu',
      images_dir: images,
      image: 'minimal',
      ready_timeout: '150s',
      boot_stall_timeout: '6s',
    });
    env = { PATH: process.env.PATH, HOME: d.dir, SVC_SOCKET: d.config.socket, SVC_TOKEN: 'test-token' };
  });
  after(async () => {
    for (const n of ['tinymem', 'panics', 'hangs', 'frozen', 'box'])
      await d.call('DELETE', `/vms/${n}`).catch(() => undefined);
    await d.stop();
  });

  /**
   * A streamed create of `image` that must fail long before the 150 s agent timeout and leave
   * nothing behind but the logs; resolves with its error.
   */
  const failsFast = async (name: string, image: string): Promise<{ error: string; progress: string }> => {
    const t0 = Date.now();
    const r = await d.call('POST', '/vms?stream=1', { name, image, memory_mb: 256 });
    const took = Date.now() - t0;
    const last = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { phase: string; error?: string })
      .at(-1)!;
    expect(last.phase, r.text).to.equal('error');
    expect(took, 'long before the 150 s agent timeout').to.be.below(60_000);
    expect((await d.call('GET', `/vms/${name}`)).status, 'nothing left but the logs').to.equal(404);
    return { error: last.error!, progress: r.text };
  };

  it('refuses at once a VM with less memory than its image boots in', async () => {
    const t0 = Date.now();
    const r = await d.call('POST', '/vms', { name: 'tinymem', memory_mb: 64 });
    expect(r.status, r.text).to.equal(400);
    expect(r.json.error).to.equal('memory_mb 64 is too little for image minimal: it boots in at least 128 MB');
    expect(Date.now() - t0).to.be.below(2000);
    expect((await d.call('GET', '/vms/tinymem')).status).to.equal(404);
  });

  it("fails a kernel panic within seconds with the console's last lines, and keeps the log", async () => {
    const { error } = await failsFast('panics', 'panics');
    expect(error).to.match(/stopped while waiting for the guest agent/);
    expect(error).to.match(/the console's last lines:\n(  \| .*\n)*  \| .*Kernel panic/);
    expect(error).to.contain(`(the console log is kept in ${d.config.data_dir}/logs)`);
  });

  it("fails a guest that hangs (silent, idle) within seconds of its last sign of life, with the console's last lines", async () => {
    const { error, progress } = await failsFast('hangs', 'hangs');
    // It was killed and booted again once (boot_stall_retries), and hung again.
    const again = progress
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { phase: string; message: string })
      .filter((e) => e.phase === 'boot' && e.message.startsWith('the guest hung while booting; booting it again'));
    expect(again, progress).to.have.length(1);
    expect(error).to.match(
      /stopped while waiting for the guest agent: the guest hangs: its console printed nothing and it used almost no CPU for \d+ s \(config boot_stall_timeout\), at each of its 2 boots \(config boot_stall_retries\)/,
    );
    expect(error).to.match(
      /the console's last lines:\n(  \| .*\n)*  \| svc-initramfs: cannot mount \/dev\/nonexistent/,
    );
  });

  it('boots again a guest whose first boot hangs (its QEMU stopped mid-boot), and it comes up', async () => {
    const made = d.call('POST', '/vms?stream=1', { name: 'frozen', memory_mb: 256 });
    // Its QEMU frozen from outside (SIGSTOP) once its guest has begun to print: a console that
    // says nothing more and no CPU, as a guest kernel stuck early in its boot looks from the host.
    const console = join(d.config.data_dir, 'vms', 'frozen', 'serial.log');
    let pid = 0;
    for (let i = 0; i < 1500 && !pid; i++) {
      const printed = existsSync(console) && statSync(console).size > 0;
      if (printed) pid = parseInt(qemuProcesses(d.config.data_dir, ['frozen'])[0] ?? '0', 10);
      if (!pid) await new Promise((r) => setTimeout(r, 20));
    }
    expect(pid, 'its guest began to boot').to.be.above(0);
    process.kill(pid, 'SIGSTOP');
    const r = await made;
    const events = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { phase: string; message: string });
    expect(events.at(-1)!.phase, r.text).to.equal('ready');
    const again = events.filter((e) => e.phase === 'boot' && e.message.includes('booting it again'));
    expect(again, r.text).to.have.length(1);
    expect(qemuProcesses(d.config.data_dir, ['frozen']).map((l) => parseInt(l, 10))).to.not.include(pid);
    const x = await d.call('POST', '/vms/frozen/exec?cmd=hostname');
    expect(x.json.stdout).to.equal('frozen\n');
    expect((await d.call('DELETE', '/vms/frozen')).status).to.equal(200);
  });

  it('creates from the CLI in a terminal with its progress, then runs commands with their exit codes', async () => {
    const term = inTerminal(SVC, ['new', 'box', '-p'], env, { cols: 100, rows: 30 });
    expect(await term.exit, term.output()).to.equal(0);
    const shown = term.output();
    // In a terminal the progress is one line, rewritten as each phase begins, and kept at the end.
    for (const phase of ['accepted', 'boot', 'wait_agent', 'ready'])
      expect(shown).to.match(new RegExp(`\\r\\x1b\\[2K${phase}\\b`));
    expect(shown).to.match(/^box\s+running\b/m);
    const x = await svc(['x', 'box', '--', 'sh', '-c', 'echo $((6*7)) $(hostname); exit 3']);
    expect(x.code, x.stderr).to.equal(3);
    expect(x.stdout).to.equal('42 box\n');
    const got = (await svc(['get', 'box'])).stdout;
    expect(got).to.match(/^image +minimal$/m);
    expect(got).to.match(/^status +running$/m);
    const pid = Number(/^process +pid (\d+) /m.exec(got)?.[1]);
    expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8'), 'the pid is the VM’s QEMU').to.match(
      /^(\S*\/)?qemu-system-x86_64\0/,
    );
  });

  it('runs svc sh with piped input to its end, and in a terminal with resize and the exit code', async () => {
    const piped = await svc(['sh', 'box'], 'echo piped-$((40+2))\nexit 4\n');
    expect(piped.code, piped.stderr).to.equal(4);
    expect(piped.stdout).to.contain('piped-42');
    const term = inTerminal(SVC, ['sh', 'box'], env, SHELL_SIZE);
    await expectShellFollowsResize(term, 1000);
    term.write('exit 5\r');
    expect(await term.exit).to.equal(5);
  });

  it('names the command that brings back a suspended VM, and the flag a mistake is in', async () => {
    expect((await svc(['suspend', 'box'])).code).to.equal(0);
    const asleep = await svc(['x', 'box', '--', 'true']);
    expect(asleep.code).to.equal(1);
    expect(asleep.stderr).to.contain(
      'vm box is suspended; its agent answers only while it runs: restore it first (svc restore box',
    );
    expect((await svc(['restore', 'box'])).code).to.equal(0);
    expect((await svc(['x', 'box', '--', 'cat', '/etc/hostname'])).stdout).to.equal('box\n');
    const tiny = await svc(['new', 'tiny', '--memory', '64']);
    expect(tiny.code).to.equal(1);
    expect(tiny.stderr).to.equal('svc: memory_mb 64 is too little for image minimal: it boots in at least 128 MB\n');
  });
});
