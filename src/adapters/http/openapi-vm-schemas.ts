/** The schemas of a VM, its create and its lifetime in the OpenAPI description (openapi.ts). */
import { ref, type Schema } from './openapi-kit.js';
import { LIMITS } from '../../domain/create-request.js';
import { CREATE_PHASES } from '../../domain/events.js';

export const VM_SCHEMAS: Record<string, Schema> = {
  Mount: {
    type: 'object',
    required: ['host', 'guest'],
    properties: {
      host: { type: 'string' },
      guest: { type: 'string' },
      tag: { type: 'string' },
      readonly: { type: 'boolean' },
    },
  },
  Instance: {
    type: 'object',
    required: [
      'name',
      'status',
      'persistent',
      'cpus',
      'memory_mb',
      'disk_gb',
      'image',
      'ip',
      'ssh_port',
      'agent_port',
      'agent_cid',
      'forwards',
    ],
    properties: {
      name: { type: 'string' },
      status: {
        type: 'string',
        enum: ['creating', 'running', 'paused', 'suspended', 'stopped', 'error', 'node_unreachable'],
        description: 'node_unreachable: in a cluster, while its node’s lease is gone (docs/cluster.md)',
      },
      node: { type: 'string', description: 'in a cluster: the node it is on' },
      suspended_at: { type: 'string', format: 'date-time' },
      persistent: { type: 'boolean' },
      cpus: { type: 'integer' },
      memory_mb: { type: 'integer' },
      disk_gb: { type: 'integer' },
      image: { type: 'string' },
      ip: { type: 'string' },
      ssh_port: { type: 'integer' },
      agent_port: { type: 'integer' },
      agent_cid: { type: 'integer' },
      pid: {
        type: 'integer',
        description:
          'its process on the host while it runs (QEMU); a clone that took a QEMU started ahead shows in ps under the spare’s name',
      },
      forwards: { type: 'array', items: ref('Forward') },
      tags: { type: 'object', additionalProperties: { type: 'string' } },
      mounts: { type: 'array', items: ref('Mount') },
      metrics_enabled: { type: 'boolean' },
      created_at: { type: 'string', format: 'date-time' },
      updated_at: { type: 'string', format: 'date-time' },
      error: { type: 'string' },
      egress: ref('EgressPolicy'),
      egress_secrets: { type: 'array', items: ref('EgressSecretBinding') },
      expires_at: { type: 'string', format: 'date-time', description: 'when its lifetime ends; absent: never' },
      on_expire: { type: 'string', enum: ['delete', 'suspend'] },
      warning: {
        type: 'string',
        description:
          'only in the answer of the call it is about: a restore, or a clone of a suspended template, whose saved state did not load, which cold-booted the VM (its processes ended or did not come along), and why',
      },
    },
  },
  CreateRequest: {
    type: 'object',
    additionalProperties: false,
    properties: {
      name: { type: 'string' },
      node: { type: 'string', description: 'in a cluster: the node to create it on (docs/cluster.md)' },
      node_selector: {
        type: 'object',
        additionalProperties: { type: 'string' },
        description: 'in a cluster: only nodes whose tags carry every pair',
      },
      persistent: { type: 'boolean', default: false },
      cpus: { type: 'integer', minimum: 1, maximum: 64 },
      memory_mb: { type: 'integer', minimum: 64 },
      disk_gb: { type: 'integer', minimum: 1 },
      image: { type: 'string' },
      tags: { type: 'object', additionalProperties: { type: 'string' } },
      userdata: { type: 'string' },
      forwards: { type: 'array', items: ref('PortForward') },
      mounts: {
        type: 'array',
        maxItems: 16,
        items: ref('Mount'),
        description: 'host folders to share; a clone or a restored copy is given them as it wakes (9p)',
      },
      metrics_enabled: { type: 'boolean' },
      entrypoint: {
        oneOf: [
          { type: 'boolean' },
          {
            type: 'object',
            required: ['restart'],
            additionalProperties: false,
            properties: {
              restart: { type: 'string', enum: ['no', 'always', 'on-failure'] },
              max_restarts: { type: 'integer', minimum: 0 },
            },
          },
        ],
        default: true,
        description:
          "run the image's entrypoint (GET /images: a container image's Entrypoint and Cmd) at each cold boot, as a process tagged entrypoint; {restart, max_restarts?}: and start it again when it ends, by that policy (docs/processes.md, Restarting); a clone's is its template's",
      },
      from: { type: 'string', description: 'clone this template (a persistent vm, stopped or suspended)' },
      from_pool: { type: 'boolean', description: 'claim a warm pool member' },
      snapshot: {
        type: 'string',
        description:
          'with from: the VM as this named snapshot of it holds it (its shape, disk, and memory when it has one), whatever the VM does now (docs/snapshots.md)',
      },
      egress: ref('EgressPolicy'),
      egress_secrets: { type: 'array', maxItems: 32, items: ref('EgressSecret') },
      ttl: ref('Ttl'),
      on_expire: {
        type: 'string',
        enum: ['delete', 'suspend'],
        default: 'delete',
        description: 'what the end of its ttl does',
      },
    },
  },
  Ttl: {
    oneOf: [
      { type: 'integer', minimum: 1, maximum: 2_073_600 },
      { type: 'string', description: 'a duration such as 90s, 30m or 1h30m' },
    ],
    description: 'a lifetime from now: whole seconds or a duration, from 1 s to 24 days (docs/api.md, "Lifetime")',
  },
  ShapeChange: {
    type: 'object',
    additionalProperties: false,
    minProperties: 1,
    description: "a stopped VM's new shape: what is given changes at its next boot, the rest stays",
    properties: {
      cpus: { type: 'integer', minimum: LIMITS.cpus[0], maximum: LIMITS.cpus[1] },
      memory_mb: { type: 'integer', minimum: LIMITS.memory_mb[0], maximum: LIMITS.memory_mb[1] },
      disk_gb: {
        type: 'integer',
        minimum: LIMITS.disk_gb[0],
        maximum: LIMITS.disk_gb[1],
        description:
          'at least its size now: a disk only grows; the guest grows its root filesystem into it as it boots',
      },
    },
  },
  LifetimeChange: {
    type: 'object',
    additionalProperties: false,
    required: ['ttl'],
    properties: {
      ttl: {
        nullable: true,
        oneOf: [
          { type: 'integer', minimum: 1, maximum: 2_073_600 },
          { type: 'string', description: 'a duration such as 90s, 30m or 1h30m' },
        ],
        description: 'a lifetime from now (whole seconds or a duration, 1 s to 24 days); null: it lives until deleted',
      },
      on_expire: { type: 'string', enum: ['delete', 'suspend'], description: 'omitted: as it was (delete at first)' },
    },
  },
  CreateProgressEvent: {
    type: 'object',
    required: ['phase', 'message', 'name', 't', 'elapsed_ms'],
    properties: {
      phase: { type: 'string', enum: [...CREATE_PHASES] },
      message: { type: 'string' },
      name: { type: 'string' },
      t: { type: 'string', format: 'date-time' },
      elapsed_ms: { type: 'integer' },
      instance: ref('Instance'),
      error: { type: 'string' },
      code: { type: 'string' },
      percent: { type: 'integer', description: 'image build progress (phase image)' },
      paused_ms: { type: 'integer', description: "how long a fork's source was held (phase capture)" },
    },
  },
};
