import { expect } from 'chai';
import type { IKeyValue } from 'etcd3';
import { EtcdCopy } from '../../../../src/adapters/cluster/etcd-copy.js';
import type { ClusterChange } from '../../../../src/ports/cluster.js';

const PREFIX = '/svc/';

/** A key's value as etcd hands it over (the watch's put or delete, or a single read). */
const kv = (key: string, value: unknown, rev: number): IKeyValue =>
  ({
    key: Buffer.from(PREFIX + key),
    value: Buffer.from(value === undefined ? '' : JSON.stringify(value)),
    mod_revision: String(rev),
  }) as unknown as IKeyValue;

const info = (node: string, running = 0) => ({ node, advertise: `http://${node}:7474`, running, tags: {} });
const entry = (node: string) => ({ node, shape: { cpus: 1, memory_mb: 256, disk_gb: 1 } });

describe('EtcdCopy: a node’s copy of the cluster’s keys', () => {
  it('takes no change older than the one it holds: a read that arrives after the watch’s later put', () => {
    const copy = new EtcdCopy(PREFIX);
    copy.keep(kv('vms/a', entry('n2'), 20));
    copy.keep(kv('vms/a', entry('n1'), 10));
    expect(copy.vm('a')).to.deep.equal(entry('n2'));
    copy.keep(kv('vms/a', entry('n3'), 21));
    expect(copy.vm('a')).to.deep.equal(entry('n3'));
  });

  it('keeps a deleted key deleted against an older read, until the delete is swept', () => {
    const copy = new EtcdCopy(PREFIX);
    copy.keep(kv('vms/a', entry('n1'), 10));
    copy.keep(kv('vms/a', undefined, 12), true);
    copy.keep(kv('vms/a', entry('n1'), 10));
    expect(copy.vm('a')).to.equal(undefined);
    expect([...copy.vms().keys()]).to.deep.equal([]);
    copy.sweep(60_000);
    copy.keep(kv('vms/a', entry('n1'), 10));
    expect(copy.vm('a'), 'a delete younger than the sweep is kept').to.equal(undefined);
    copy.sweep(-1);
    copy.keep(kv('vms/a', entry('n1'), 10));
    expect(copy.vm('a'), 'once swept, the revision is forgotten').to.deep.equal(entry('n1'));
  });

  it('sees a node ready while its lease holds, unreachable after, with what is placed on it', () => {
    const copy = new EtcdCopy(PREFIX);
    expect(copy.node('n1')).to.equal(undefined);
    copy.keep(kv('members/n1', info('n1'), 1));
    copy.keep(kv('nodes/n1', info('n1', 2), 2));
    expect(copy.node('n1')).to.include({ node: 'n1', state: 'ready', running: 2 });
    expect(copy.node('n1')!.allocated).to.include({ vms: 0 });
    copy.keep(kv('alloc/n1', { vms: 3, cpus: 3, memory_mb: 768, disk_gb: 3 }, 3));
    expect(copy.node('n1')!.allocated).to.include({ vms: 3 });
    copy.keep(kv('nodes/n1', undefined, 4), true);
    expect(copy.node('n1')).to.include({ state: 'unreachable', running: 0 });
    copy.keep(kv('members/n0', info('n0'), 5));
    expect(copy.nodes().map((n) => n.node)).to.deep.equal(['n0', 'n1']);
    copy.keep(kv('members/n0', undefined, 6), true);
    expect(copy.nodes().map((n) => n.node)).to.deep.equal(['n1']);
  });

  it('tells its listeners a VM’s change with what it was, and a lease that came or went, not a renewal', () => {
    const copy = new EtcdCopy(PREFIX);
    const seen: ClusterChange[] = [];
    const stop = copy.watch((c) => seen.push(c));
    copy.keep(kv('members/n1', info('n1'), 1), false, true);
    copy.keep(kv('vms/a', entry('n1'), 2));
    copy.keep(kv('nodes/n1', info('n1'), 3));
    copy.keep(kv('nodes/n1', info('n1', 1), 4));
    copy.keep(kv('vms/a', undefined, 5), true);
    copy.keep(kv('nodes/n1', undefined, 6), true);
    copy.keep(kv('alloc/n1', { vms: 0 }, 7));
    expect(seen).to.deep.equal([
      { kind: 'vm', name: 'a', entry: entry('n1'), was: undefined },
      { kind: 'node', node: 'n1' },
      { kind: 'vm', name: 'a', entry: undefined, was: entry('n1') },
      { kind: 'node', node: 'n1' },
    ]);
    stop();
    copy.keep(kv('vms/b', entry('n1'), 8));
    expect(seen.length).to.equal(4);
  });
});
