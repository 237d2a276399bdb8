import { err, json, op, ref, jsonBody, type Schema } from './openapi-kit.js';

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
      draining: { type: 'boolean', description: 'drained: nothing new is placed on it (absent when not)' },
    },
  },
  DrainResult: {
    type: 'object',
    required: ['node', 'moved', 'refused'],
    properties: {
      node: { type: 'string' },
      moved: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            name: { type: 'string' },
            node: { type: 'string' },
            warning: {
              type: 'string',
              description:
                'a running or paused vm that moved but did not restore there (suspended there) or was not paused again there (running there)',
            },
          },
        },
      },
      refused: {
        type: 'array',
        description: 'what stays on the node, and why (a paused vm, an ephemeral one running, one with host folders)',
        items: { type: 'object', properties: { name: { type: 'string' }, reason: { type: 'string' } } },
      },
    },
  },
};

const stale = {
  'X-Svc-Stale': {
    description: '1 while etcd cannot be reached: what the answer says may be old',
    schema: { type: 'string' },
  },
};

const nodeParam = { name: 'node', in: 'path', required: true, schema: { type: 'string' } };
const idParam = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };

export const CLUSTER_PATHS: Record<string, Schema> = {
  '/vms/{name}/move': {
    post: op(
      'Move a VM to another node (its disk, saved state and snapshots go with it); a running one is suspended for the move and restored there, a paused one restored paused there',
      {
        '200': json(
          'the vm on its new node (`warning` when it moved but did not restore there, suspended there, or a paused one that cold-booted there was not paused again)',
          ref('Instance'),
        ),
        '400': err(
          'paused, or ephemeral and running, or sharing host folders, or on that node already; or the node has another build of its image',
        ),
        '404': err('no such vm or node'),
        '429': err('no room left on the node'),
        '503': err('the node is unreachable'),
      },
      {
        parameters: [{ name: 'name', in: 'path', required: true, schema: { type: 'string' } }],
        requestBody: jsonBody({
          type: 'object',
          properties: {
            node: {
              type: 'string',
              description: 'where to; without it, the node the placement rule picks among the others (as a drain does)',
            },
          },
        }),
        'x-svc-cluster': true,
      },
    ),
  },
  '/nodes/{node}/drain': {
    post: op(
      'Drain a node: its VMs move to the others (running and paused ones suspended for it and restored there, paused ones restored paused), nothing new is placed on it',
      { '200': json('what moved and what stayed', ref('DrainResult')), '404': err('no such node') },
      { parameters: [nodeParam], 'x-svc-cluster': true },
    ),
    delete: op(
      'End a drain: creates may be placed on the node again',
      { '200': json('the node', ref('Node')), '404': err('no such node') },
      { parameters: [nodeParam], 'x-svc-cluster': true },
    ),
  },
  '/cluster/images/{id}': {
    get: op(
      'What this node offers of an image another node fetches: its files with their sizes and sha256, and its digest. Only nodes call this.',
      {
        '200': json('the offer', {
          type: 'object',
          required: ['id', 'digest', 'files'],
          properties: {
            id: { type: 'string' },
            digest: { type: 'string' },
            files: {
              type: 'array',
              items: {
                type: 'object',
                properties: { name: { type: 'string' }, size: { type: 'integer' }, sha256: { type: 'string' } },
              },
            },
          },
        }),
        '404': err('not built here'),
      },
      { parameters: [idParam], 'x-svc-cluster': true, 'x-svc-internal': true },
    ),
  },
  '/cluster/images/{id}/files/{file}': {
    get: op(
      'One file of an image, whole or from a Range (a fetch cut off asks for the rest). Only nodes call this.',
      {
        '200': {
          description: 'the file',
          content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
        },
        '206': {
          description: 'the part asked for',
          content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
        },
        '404': err('no such image or file'),
      },
      {
        parameters: [idParam, { name: 'file', in: 'path', required: true, schema: { type: 'string' } }],
        'x-svc-cluster': true,
        'x-svc-internal': true,
      },
    ),
  },
  '/cluster/images/{id}/fetch': {
    post: op(
      'Fetch an image from a node that has it, before a create is placed here. Only nodes call this.',
      {
        '200': {
          description:
            'fetched (or here already): `{id}`; with `stream=1`, NDJSON lines `{image, from, bytes, total}` while it fetches, then `{id}` or `{error, code, status}`',
          content: {
            'application/json': { schema: { type: 'object', properties: { id: { type: 'string' } } } },
            'application/x-ndjson': { schema: { type: 'string' } },
          },
        },
        '404': err('no ready node has it'),
      },
      {
        parameters: [idParam, { name: 'stream', in: 'query', schema: { type: 'string', enum: ['1'] } }],
        'x-svc-cluster': true,
        'x-svc-internal': true,
      },
    ),
  },
  '/cluster/vms/{name}': {
    put: op(
      'A VM sent by another node (a move): a tar of offer.json and its files. Only nodes call this, with the cluster token.',
      {
        '200': json("the vm, now this node's", ref('Instance')),
        '400': err('not the tar of a moved vm, or what it stands on differs here'),
        '403': err('not a node of the cluster'),
        '413': err("more bytes than the vm's disk and memory hold"),
      },
      {
        parameters: [{ name: 'name', in: 'path', required: true, schema: { type: 'string' } }],
        requestBody: {
          required: true,
          content: { 'application/x-tar': { schema: { type: 'string', format: 'binary' } } },
        },
        'x-svc-cluster': true,
        'x-svc-internal': true,
      },
    ),
  },
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
