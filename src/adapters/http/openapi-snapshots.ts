/** A VM's named snapshots in the OpenAPI description (openapi.ts; docs/snapshots.md). */
import { err, json, jsonBody, nameParam, op, ref, type Schema } from './openapi-kit.js';

const snapshotParam = {
  name: 'snapshot',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,62}$' },
};
const noSuch = err('no such vm or snapshot');

export const SNAPSHOT_SCHEMAS: Record<string, Schema> = {
  VmSnapshot: {
    type: 'object',
    required: ['name', 'created_at', 'memory', 'taken_from', 'cpus', 'memory_mb', 'disk_gb'],
    properties: {
      name: { type: 'string' },
      created_at: { type: 'string', format: 'date-time' },
      memory: {
        type: 'boolean',
        description: "the guest's memory is in it: a revert resumes the guest as it ran; else the VM is left stopped",
      },
      taken_from: { type: 'string', enum: ['running', 'paused', 'stopped', 'suspended', 'error'] },
      cpus: { type: 'integer' },
      memory_mb: { type: 'integer' },
      disk_gb: { type: 'integer', description: 'the shape a revert gives the VM back' },
      description: { type: 'string' },
    },
  },
  SnapshotRequest: {
    type: 'object',
    additionalProperties: false,
    properties: {
      name: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,62}$', description: 'default snap-N' },
      description: { type: 'string', maxLength: 512 },
    },
  },
};

export const SNAPSHOT_PATHS: Record<string, Record<string, Schema>> = {
  '/vms/{name}/snapshots': {
    get: op(
      "The VM's snapshots, oldest first",
      { '200': json('snapshots', { type: 'array', items: ref('VmSnapshot') }), '404': err('no such vm') },
      { parameters: [nameParam] },
    ),
    post: op(
      'Take a snapshot of the VM as it is now: a running or paused one with its memory (held for a moment), a stopped one its disk, a suspended one its disk and saved state',
      {
        '201': json('the snapshot', ref('VmSnapshot')),
        '400': err('a bad name or body, or a VM being created'),
        '404': err('no such vm'),
        '409': err('the VM has a snapshot of that name'),
        '429': err('the VM has as many snapshots as a VM keeps (32)'),
        '501': err('the hypervisor keeps no snapshots'),
      },
      { parameters: [nameParam], requestBody: jsonBody(ref('SnapshotRequest'), false) },
    ),
  },
  '/vms/{name}/snapshots/{snapshot}': {
    get: op(
      'One snapshot',
      { '200': json('the snapshot', ref('VmSnapshot')), '404': noSuch },
      {
        parameters: [nameParam, snapshotParam],
      },
    ),
    delete: op(
      'Delete a snapshot (the VM is not changed)',
      {
        '200': json('deleted', {
          type: 'object',
          required: ['message', 'name', 'snapshot'],
          properties: { message: { type: 'string' }, name: { type: 'string' }, snapshot: { type: 'string' } },
        }),
        '404': noSuch,
      },
      { parameters: [nameParam, snapshotParam] },
    ),
  },
  '/vms/{name}/snapshots/{snapshot}/revert': {
    post: op(
      'Put the VM back to the snapshot in place: a running guest is stopped at once; a snapshot with memory resumes its guest as it ran, one without leaves the VM stopped; the VM takes the shape it had then',
      {
        '200': json(
          'the VM as the revert left it (`warning` when its saved guest did not load and it cold-booted)',
          ref('Instance'),
        ),
        '400': err('a VM being created, or one whose forks are being made'),
        '404': noSuch,
        '429': err("in a cluster, its node has no room for the snapshot's shape"),
        '501': err('the hypervisor keeps no snapshots'),
      },
      { parameters: [nameParam, snapshotParam] },
    ),
  },
};
