import { expect } from 'chai';
import { InvalidStateError } from '../../../src/domain/errors.js';
import {
  ALLOWED_SOURCES,
  VM_STATUSES,
  assertTransition,
  changeStatus,
  toPublic,
  type VmRecord,
  type LifecycleVerb,
} from '../../../src/domain/vm.js';

describe('domain/instance state machine', () => {
  const verbs = Object.keys(ALLOWED_SOURCES) as LifecycleVerb[];
  for (const verb of verbs) {
    for (const status of VM_STATUSES) {
      const allowed = ALLOWED_SOURCES[verb].includes(status);
      it(`${verb} from ${status} is ${allowed ? 'allowed' : 'refused'} (persistent vm)`, () => {
        const rec = { name: 'web', status, persistent: true };
        if (allowed) expect(() => assertTransition(rec, verb)).not.to.throw();
        else expect(() => assertTransition(rec, verb)).to.throw(InvalidStateError, /vm web is .*; use|wait/);
      });
    }
  }

  it('names the verb to use instead', () => {
    expect(() => assertTransition({ name: 'web', status: 'paused', persistent: true }, 'pause')).to.throw(
      'vm web is already paused; use resume',
    );
    expect(() => assertTransition({ name: 'web', status: 'suspended', persistent: true }, 'start')).to.throw(
      'vm web is suspended; use restore',
    );
    expect(() => assertTransition({ name: 'web', status: 'stopped', persistent: true }, 'restore')).to.throw(
      'vm web is stopped; use start',
    );
  });

  it('refuses suspend of an ephemeral vm and start of a failed ephemeral one', () => {
    expect(() => assertTransition({ name: 'e', status: 'running', persistent: false }, 'suspend')).to.throw(
      InvalidStateError,
      /ephemeral/,
    );
    expect(() => assertTransition({ name: 'e', status: 'error', persistent: false }, 'start')).to.throw(
      InvalidStateError,
      /ephemeral/,
    );
  });

  it('keeps the bytes noted at a suspend or a pause only while the guest is held', () => {
    const rec: Parameters<typeof changeStatus>[0] = { name: 'web', status: 'running' };
    changeStatus(rec, { to: 'suspended', at: 'x' });
    rec.saved_output = { p1: { stdout: 3 } };
    changeStatus(rec, { to: 'running' });
    expect(rec).to.not.have.any.keys('saved_output', 'suspended_at');
    changeStatus(rec, { to: 'paused' });
    rec.saved_output = { p1: { stdout: 5 } };
    changeStatus(rec, { to: 'suspended', at: 'y' });
    expect(rec.saved_output, 'a suspend of the paused guest').to.deep.equal({ p1: { stdout: 5 } });
    changeStatus(rec, { to: 'running' });
    changeStatus(rec, { to: 'paused' });
    rec.saved_output = { p1: { stdout: 7 } };
    changeStatus(rec, { to: 'running' });
    expect(rec, 'resumed').to.not.have.property('saved_output');
  });

  it('never exposes userdata or runtime, and shows suspended_at/error only in their states', () => {
    const rec: VmRecord = {
      name: 'a',
      status: 'running',
      persistent: true,
      cpus: 1,
      memory_mb: 512,
      disk_gb: 4,
      image: 'default',
      ip: '',
      ssh_port: 1,
      agent_port: 2,
      agent_cid: 0,
      forwards: [],
      tags: {},
      mounts: [],
      metrics_enabled: true,
      created_at: '',
      updated_at: '',
      userdata: 'secret',
      runtime: { pid: 1 } as unknown as VmRecord['runtime'],
      suspended_at: 'x',
      error: 'old',
      egress: { default: 'allow', allow: [], deny: [] },
    };
    const pub = toPublic({ ...rec, saved_output: { p1: { stdout: 3 } } }) as unknown as Record<string, unknown>;
    expect(pub).not.to.have.any.keys('userdata', 'runtime', 'suspended_at', 'error', 'saved_output');
    expect(toPublic({ ...rec, status: 'suspended' }).suspended_at).to.equal('x');
  });
});
