import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';

/** The files under `dir` this process holds open. */
function heldUnder(dir: string): string[] {
  const held: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(`${dir}/`)) held.push(target);
    } catch {
      // closed meanwhile
    }
  }
  return held;
}

// The host's disk under the data dir filling up: a create says so (507) and leaves nothing; what
// happens to a VM that exists is still recorded (the data dir's reserve); a delete, which is how
// room is made, still works (docs/architecture.md, errors).
describe('a full disk under the data dir (fake hypervisor, a tmpfs of 4 MiB)', function () {
  this.timeout(60_000);
  let dir: string;
  let d: TestDaemon | undefined;
  before(function () {
    if (process.getuid?.() !== 0) this.skip(); // mounting a tmpfs needs root; CI runs as root
    dir = tempDir('svc-full-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', dir]);
  });
  after(async () => {
    await d?.stop();
    if (dir && existsSync(dir)) execFileSync('umount', [dir]);
  });

  it('refuses a create with 507 leaving nothing behind, records a shutdown, deletes to make room, then creates again', async () => {
    d = await startTestDaemon({ sandbox_metrics_interval: '100ms', state_reserve_mb: 1 }, {}, join(dir, 'd'));
    const reserve = join(d.config.data_dir, '.reserve');
    expect(existsSync(reserve)).to.equal(true);
    for (const name of ['a', 'b'])
      expect((await d.call('POST', '/vms', { name, persistent: true })).status).to.equal(201);
    // everything else the disk holds
    const filler = join(dir, 'filler');
    try {
      writeFileSync(filler, Buffer.alloc(8 << 20));
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).to.equal('ENOSPC');
    }
    await new Promise((r) => setTimeout(r, 500)); // a few stats samples on the full disk
    const vms = join(d.config.data_dir, 'vms');
    const refused = await d.call('POST', '/vms', { name: 'c' });
    expect(refused.status, refused.text).to.equal(507);
    expect(refused.json.code).to.equal('insufficient_storage');
    expect(refused.json.error).to.match(/no space left/);
    expect(readdirSync(vms).sort()).to.deep.equal(['a', 'b']);
    expect((await d.call('GET', '/vms')).json.map((v: { name: string }) => v.name).sort()).to.deep.equal(['a', 'b']);

    // a shutdown stops the VM and records it: the reserve gives its room for that
    const down = await d.call('POST', '/vms/b/shutdown');
    expect(down.status, down.text).to.equal(200);
    const onDisk = () => JSON.parse(readFileSync(join(vms, 'b', 'instance.json'), 'utf8')).status as string;
    expect([onDisk(), existsSync(reserve)]).to.deep.equal(['stopped', false]);

    const deleted = await d.call('DELETE', '/vms/a');
    expect(deleted.status, deleted.text).to.equal(200);
    expect(readdirSync(vms)).to.deep.equal(['b']);
    rmSync(filler);
    mkdirSync(join(dir, 'room')); // the disk is usable again
    expect((await d.call('POST', '/vms', { name: 'c', persistent: true })).status).to.equal(201);
    // the daemon's record of its VMs is whole after all that
    await d.restart();
    expect((await d.call('GET', '/vms')).json.map((v: { name: string }) => v.name).sort()).to.deep.equal(['b', 'c']);
    expect((await d.call('GET', '/vms/b')).json.status).to.equal('stopped');
    expect(existsSync(reserve), 'the reserve taken again').to.equal(true);
    // and a stopped daemon holds nothing open there: each stats sample on the full disk left its
    // ring's descriptor open, one more a sample
    await d.stop();
    d = undefined;
    expect(heldUnder(dir)).to.deep.equal([]);
  });
});
