import { err, json, op, ref, type Schema } from './openapi-kit.js';

/**
 * The OpenAPI description of a cluster's routes (docs/cluster.md), marked `x-svc-cluster`: a daemon
 * with no `cluster` section serves none of them.
 */

const load = {
  type: 'object',
  properties: {
    vms: { type: 'integer' },
    cpus: { type: 'integer' },
    memory_mb: { type: 'integer' },
    disk_gb: { type: 'integer' },
  },
};

export const CLUSTER_SCHEMAS: Record<string, Schema> = {
  Node: {
    type: 'object',
    required: ['node', 'state', 'advertise', 'capacity', 'allocated'],
    properties: {
      node: { type: 'string' },
      state: { type: 'string', enum: ['ready', 'unreachable'], description: 'unreachable: its lease in etcd is gone' },
      advertise: { type: 'string', description: 'the URL other nodes reach its API at' },
      capacity: {
        type: 'object',
        properties: {
          cpus: { type: 'integer' },
          memory_mb: { type: 'integer' },
          disk_gb: { type: 'integer' },
          vm_slots: { type: 'integer' },
        },
      },
      allocated: { ...load, description: 'what is placed on it (reserved when placed, given back when removed)' },
      images: { type: 'array', items: { type: 'string' } },
      hypervisor: { type: 'string' },
      tags: { type: 'object', additionalProperties: { type: 'string' } },
      version: { type: 'string' },
      started_at: { type: 'string', format: 'date-time' },
      seen_at: { type: 'string', format: 'date-time', description: 'when it last said something new of itself' },
      running: { type: 'integer', description: 'VMs running on it' },
    },
  },
};

const stale = {
  'X-Svc-Stale': {
    description: '1 while etcd cannot be reached: what the answer says may be old',
    schema: { type: 'string' },
  },
};

export const CLUSTER_PATHS: Record<string, Schema> = {
  '/nodes': {
    get: op(
      'The nodes of the cluster',
      { '200': { ...json('every node that joined', { type: 'array', items: ref('Node') }), headers: stale } },
      { 'x-svc-cluster': true },
    ),
  },
  '/nodes/{node}': {
    get: op(
      'One node of the cluster',
      { '200': json('the node', ref('Node')), '404': err('no such node') },
      { parameters: [{ name: 'node', in: 'path', required: true, schema: { type: 'string' } }], 'x-svc-cluster': true },
    ),
  },
};
