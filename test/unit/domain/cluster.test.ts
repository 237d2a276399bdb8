import { expect } from 'chai';
import { addLoad, fits, NO_LOAD, placeVm, placementAsk, type NodeView } from '../../../src/domain/cluster.js';

const node = (name: string, o: Partial<NodeView> = {}): NodeView => ({
  node: name,
  advertise: `http://${name}:7474`,
  capacity: { cpus: 8, memory_mb: 8192, disk_gb: 100, vm_slots: 10 },
  images: ['default'],
  hypervisor: 'fake',
  tags: {},
  version: 'test',
  started_at: '',
  seen_at: '',
  running: 0,
  state: 'ready',
  allocated: { ...NO_LOAD },
  ...o,
});
const shape = { cpus: 1, memory_mb: 512, disk_gb: 4, image: 'default' };
const never = () => false;

describe('domain/cluster: placement', () => {
  it('picks the least full ready node, then the one with fewer vms, then by name', () => {
    const a = node('a', { allocated: { vms: 2, cpus: 4, memory_mb: 1024, disk_gb: 8 } });
    const b = node('b', { allocated: { vms: 1, cpus: 1, memory_mb: 1024, disk_gb: 4 } });
    const c = node('c', { state: 'unreachable' });
    expect(placeVm([a, b, c], shape, {}, never).node).to.equal('b');
    const d = node('d', { allocated: { vms: 0, cpus: 1, memory_mb: 1024, disk_gb: 0 } });
    expect(placeVm([b, d], shape, {}, never).node).to.equal('d');
    expect(placeVm([node('y'), node('x')], shape, {}, never).node).to.equal('x');
  });

  it('passes a drained node by, and refuses it when it is asked for by name', () => {
    const a = node('a', { draining: true });
    const b = node('b', { allocated: { vms: 9, cpus: 7, memory_mb: 4000, disk_gb: 90 } });
    expect(placeVm([a, b], shape, {}, never).node).to.equal('b');
    expect(() => placeVm([a, b], shape, { node: 'a' }, never)).to.throw(/node a is drained/);
    expect(() => placeVm([a], shape, {}, never)).to.throw(/no node of the cluster is ready/);
  });

  it('keeps to the node asked for, and to nodes with every tag of the selector', () => {
    const a = node('a', { tags: { zone: 'a', gpu: 'no' } });
    const b = node('b', { tags: { zone: 'b' }, allocated: { vms: 5, cpus: 5, memory_mb: 5000, disk_gb: 5 } });
    expect(placeVm([a, b], shape, { node: 'b' }, never).node).to.equal('b');
    expect(placeVm([a, b], shape, { node_selector: { zone: 'b' } }, never).node).to.equal('b');
    expect(() => placeVm([a, b], shape, { node_selector: { zone: 'c' } }, never)).to.throw(
      /no ready node has the tags zone=c/,
    );
    expect(() => placeVm([a, b], shape, { node: 'z' }, never)).to.throw(/no node z/);
    expect(() => placeVm([a, node('u', { state: 'unreachable' })], shape, { node: 'u' }, never))
      .to.throw(/node u is unreachable/)
      .with.property('code', 'unavailable');
  });

  it('never over-commits: slots, cpus, memory and disk each bound a node', () => {
    const full = { vms: 10, cpus: 0, memory_mb: 0, disk_gb: 0 };
    expect(fits(node('a', { allocated: full }), shape)).to.equal(false);
    expect(fits(node('a', { allocated: { ...NO_LOAD, cpus: 8 } }), shape)).to.equal(false);
    expect(fits(node('a', { allocated: { ...NO_LOAD, memory_mb: 7681 } }), shape)).to.equal(false);
    expect(fits(node('a', { allocated: { ...NO_LOAD, memory_mb: 7680 } }), shape)).to.equal(true);
    expect(fits(node('a', { allocated: { ...NO_LOAD, disk_gb: 97 } }), shape)).to.equal(false);
    // Many at once (a fork call's): each bound counts them all.
    const nine = { vms: 1, cpus: 0, memory_mb: 0, disk_gb: 0 };
    expect(fits(node('a', { allocated: nine }), { cpus: 0, memory_mb: 0, disk_gb: 0 }, 9)).to.equal(true);
    expect(fits(node('a', { allocated: nine }), { cpus: 0, memory_mb: 0, disk_gb: 0 }, 10)).to.equal(false);
    expect(fits(node('a'), shape, 8)).to.equal(true);
    expect(fits(node('a'), shape, 9)).to.equal(false);
    expect(() => placeVm([node('a', { allocated: full })], shape, {}, never))
      .to.throw(/no node has room/)
      .with.property('code', 'resource_exhausted');
  });

  it('places an image only where it is, unless every node can build it', () => {
    const a = node('a', { images: ['default', 'mine'] });
    const b = node('b');
    expect(placeVm([b, a], { ...shape, image: 'mine' }, {}, never).node).to.equal('a');
    expect(() => placeVm([b], { ...shape, image: 'mine' }, {}, never)).to.throw(/no ready node has the image mine/);
    expect(placeVm([b], { ...shape, image: 'mine' }, {}, () => true).node).to.equal('b');
  });

  it('reads node and node_selector from a create body, and refuses bad ones', () => {
    expect(placementAsk({ name: 'x', node: 'n1', node_selector: { zone: 'a' } })).to.deep.equal({
      node: 'n1',
      node_selector: { zone: 'a' },
    });
    expect(placementAsk(undefined)).to.deep.equal({});
    expect(() => placementAsk({ node: 'N 1' })).to.throw(/node must be a node name/);
    expect(() => placementAsk({ node_selector: { zone: 1 } })).to.throw(/node_selector must be a mapping/);
  });

  it('adds and takes back a shape, never below zero', () => {
    const one = addLoad(NO_LOAD, shape, 1);
    expect(one).to.deep.equal({ vms: 1, cpus: 1, memory_mb: 512, disk_gb: 4 });
    expect(addLoad(one, shape, -1)).to.deep.equal(NO_LOAD);
    expect(addLoad(NO_LOAD, shape, -1)).to.deep.equal(NO_LOAD);
    expect(addLoad(one, shape, 3)).to.deep.equal({ vms: 4, cpus: 4, memory_mb: 2048, disk_gb: 16 });
  });
});
