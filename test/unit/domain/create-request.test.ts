import { expect } from 'chai';
import {
  parseCreateRequest,
  parseCreateTimeout,
  parseShapeChange,
  parseWaitMode,
} from '../../../src/domain/create-request.js';
import { parseDuration } from '../../../src/domain/duration.js';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { assertSecretName, assertVmName, nextDefaultName } from '../../../src/domain/names.js';

describe('domain/create-request', () => {
  it('accepts an empty or missing body with defaults', () => {
    for (const body of [undefined, null, {}]) {
      const r = parseCreateRequest(body);
      expect(r).to.deep.equal({ persistent: false, tags: {}, forwards: [], mounts: [] });
    }
  });

  it('parses every field', () => {
    const r = parseCreateRequest({
      name: 'web-1',
      persistent: true,
      cpus: 2,
      memory_mb: 1024,
      disk_gb: 8,
      image: 'default',
      tags: { team: 'a' },
      userdata: '#!/bin/sh\ntrue',
      forwards: [{ guest_port: 80 }, { host_port: 8080, guest_port: 8080, proto: 'udp' }],
      mounts: [{ host: '/tmp', guest: '/mnt/tmp', tag: 'tmp', readonly: true }],
      metrics_enabled: false,
    });
    expect(r.forwards).to.deep.equal([
      { host_port: 0, guest_port: 80, proto: 'tcp' },
      { host_port: 8080, guest_port: 8080, proto: 'udp' },
    ]);
    expect(r.mounts[0]).to.deep.equal({ host: '/tmp', guest: '/mnt/tmp', tag: 'tmp', readonly: true });
    expect(r.metrics_enabled).to.equal(false);
  });

  const bad: [string, unknown, RegExp][] = [
    ['non-object body', [1], /JSON object/],
    ['unknown field', { nmae: 'x' }, /unknown field "nmae"/],
    ['bad name', { name: 'Web' }, /invalid vm name/],
    ['name with slash', { name: 'a/../b' }, /invalid vm name/],
    ['cpus as string', { cpus: '2' }, /cpus must be an integer/],
    ['cpus zero', { cpus: 0 }, /cpus must be an integer from 1/],
    ['fractional memory', { memory_mb: 512.5 }, /memory_mb/],
    ['huge disk', { disk_gb: 100000 }, /disk_gb/],
    ['persistent as string', { persistent: 'yes' }, /persistent must be a boolean/],
    ['tags not object', { tags: ['a'] }, /tags must be an object/],
    ['tag value number', { tags: { a: 1 } }, /tags.a must be a string/],
    [
      'cpus nested 400k deep',
      { cpus: JSON.parse('['.repeat(400_000) + ']'.repeat(400_000)) },
      /cpus must be an integer from 1 to 64, got an array$/,
    ],
    ['tag value too long', { tags: { a: 'x'.repeat(2049) } }, /tags.a: at most 2048 characters, got 2049/],
    ['forward without guest port', { forwards: [{ host_port: 8080 }] }, /guest_port is required/],
    ['privileged host port', { forwards: [{ host_port: 80, guest_port: 80 }] }, /privileged/],
    ['bad proto', { forwards: [{ guest_port: 80, proto: 'sctp' }] }, /tcp or udp/],
    [
      'duplicate host port',
      {
        forwards: [
          { host_port: 8080, guest_port: 1 },
          { host_port: 8080, guest_port: 2 },
        ],
      },
      /given twice/,
    ],
    ['relative mount', { mounts: [{ host: 'tmp', guest: '/x' }] }, /absolute/],
    [
      '17 mounts',
      { mounts: Array.from({ length: 17 }, (_, i) => ({ host: '/tmp', guest: `/m${i}`, tag: `t${i}` })) },
      /mounts: at most 16 host folders, got 17/,
    ],
    ['comma in mount path', { mounts: [{ host: '/tmp,readonly=on', guest: '/x' }] }, /commas/],
    ['__proto__ as a tag key', JSON.parse('{"tags":{"__proto__":"x"}}'), /tags: __proto__ is not allowed/],
    ['quote in a guest mount path', { mounts: [{ host: '/tmp', guest: "/mnt/x'; reboot; '" }] }, /quotes/],
    ['$ in a guest mount path', { mounts: [{ host: '/tmp', guest: '/mnt/$(reboot)' }] }, /quotes, backquotes, \$/],
    ['newline in a guest mount path', { mounts: [{ host: '/tmp', guest: '/mnt/a\nb' }] }, /control characters/],
    ['.. in a guest mount path', { mounts: [{ host: '/tmp', guest: '/mnt/../etc' }] }, /\.\./],
    ['unsafe mount tag', { mounts: [{ host: '/tmp', guest: '/x', tag: 'a,b=c' }] }, /tag must match/],
    [
      'duplicate mount tags',
      {
        mounts: [
          { host: '/a', guest: '/x', tag: 't' },
          { host: '/b', guest: '/y', tag: 't' },
        ],
      },
      /unique/,
    ],
    ['bad image', { image: '../etc' }, /invalid image/],
    ['a snapshot without from', { snapshot: 'snap-1' }, /snapshot needs from: the VM whose snapshot it is/],
    ['a snapshot with from_pool', { from_pool: true, snapshot: 'snap-1' }, /snapshot needs from/],
    ['a bad snapshot name', { from: 'web', snapshot: '../x' }, /invalid snapshot name/],
    ['a shape on a snapshot clone', { from: 'web', snapshot: 's', cpus: 2 }, /cpus cannot be set on a clone/],
  ];
  for (const [what, body, re] of bad) {
    it(`rejects ${what}`, () => {
      expect(() => parseCreateRequest(body)).to.throw(InvalidArgumentError, re);
    });
  }

  it('parses wait modes: empty is auto, legacy true/1 is ssh, false/0 refused', () => {
    expect(parseWaitMode(undefined)).to.equal('auto');
    expect(parseWaitMode('')).to.equal('auto');
    expect(parseWaitMode('true')).to.equal('ssh');
    expect(parseWaitMode('1')).to.equal('ssh');
    for (const m of ['auto', 'ssh', 'agent', 'userdata', 'bootstrap']) expect(parseWaitMode(m)).to.equal(m);
    expect(() => parseWaitMode('false')).to.throw(InvalidArgumentError, /not supported/);
    expect(() => parseWaitMode('0')).to.throw(InvalidArgumentError, /not supported/);
    expect(() => parseWaitMode('soon')).to.throw(InvalidArgumentError, /invalid wait mode/);
    expect(() => parseWaitMode(['ssh', 'agent'])).to.throw(InvalidArgumentError);
  });

  it('parses timeouts', () => {
    expect(parseCreateTimeout(undefined)).to.equal(undefined);
    expect(parseCreateTimeout('90s')).to.equal(90_000);
    expect(parseCreateTimeout('3m')).to.equal(180_000);
    expect(() => parseCreateTimeout('3 minutes')).to.throw(InvalidArgumentError, /invalid duration/);
    expect(() => parseCreateTimeout('2h')).to.throw(InvalidArgumentError, /between/);
  });

  it('parses durations', () => {
    expect(parseDuration('1h30m', 'x')).to.equal(5_400_000);
    expect(parseDuration('250ms', 'x')).to.equal(250);
    expect(parseDuration('2', 'x')).to.equal(2000);
    expect(() => parseDuration('', 'x')).to.throw(InvalidArgumentError);
    expect(() => parseDuration('5d', 'x')).to.throw(InvalidArgumentError);
  });

  it('validates names and picks default names', () => {
    expect(assertVmName('a')).to.equal('a');
    expect(() => assertVmName('a'.repeat(64))).to.throw(InvalidArgumentError);
    expect(() => assertVmName('-a')).to.throw(InvalidArgumentError);
    expect(() => assertVmName('..')).to.throw(InvalidArgumentError);
    expect(assertSecretName('DB_PASS.v2')).to.equal('DB_PASS.v2');
    expect(() => assertSecretName('1x')).to.throw(InvalidArgumentError);
    expect(nextDefaultName([])).to.equal('vm-1');
    expect(nextDefaultName(['vm-1', 'vm-7', 'web', 'vm-x'])).to.equal('vm-8');
  });
});

describe("domain/create-request: a change of a stopped VM's shape", () => {
  const refused = (body: unknown, re: RegExp) =>
    expect(() => parseShapeChange(body)).to.throw(InvalidArgumentError, re);

  it("takes any of cpus, memory_mb and disk_gb within a create's limits, and nothing else", () => {
    expect(parseShapeChange({ cpus: 2 })).to.deep.equal({ cpus: 2 });
    expect(parseShapeChange({ memory_mb: 1024, disk_gb: 20 })).to.deep.equal({ memory_mb: 1024, disk_gb: 20 });
    expect(parseShapeChange({ cpus: 64, memory_mb: 262_144, disk_gb: 2048 })).to.deep.equal({
      cpus: 64,
      memory_mb: 262_144,
      disk_gb: 2048,
    });
    refused({}, /nothing to change/);
    refused(null, /JSON object/);
    refused('cpus=2', /JSON object/);
    refused([], /JSON object/);
    refused({ cpus: 65 }, /cpus must be an integer from 1 to 64/);
    refused({ cpus: 1.5 }, /cpus must be an integer/);
    refused({ memory_mb: '512' }, /memory_mb must be an integer/);
    refused({ disk_gb: 0 }, /disk_gb must be an integer from 1 to 2048/);
    refused({ image: 'debian' }, /unknown field image: a VM's cpus, memory_mb and disk_gb can be changed/);
  });
});
