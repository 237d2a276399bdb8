/**
 * The daemon's OpenAPI 3 description, built as data so a test can compare its paths with the
 * routes express serves. Operations with `x-svc-planned: true` are described but not served yet.
 */
import { err, json, message, nameParam, op, proxyErrors, q, ref, jsonBody, type Schema } from './openapi-kit.js';
import { PROCESS_PATHS, PROCESS_SCHEMAS } from './openapi-processes.js';
import { CLUSTER_PATHS, CLUSTER_SCHEMAS } from './openapi-cluster.js';
import { EGRESS_PATHS, EGRESS_SCHEMAS } from './openapi-egress.js';
import { GUEST_PATHS, GUEST_SCHEMAS } from './openapi-guest.js';
import { IMAGE_PATHS, IMAGE_SCHEMAS } from './openapi-images.js';
import { SYSTEM_PATHS, SYSTEM_SCHEMAS } from './openapi-system.js';

const schemas: Record<string, Schema> = {
  Error: { type: 'object', required: ['error'], properties: { error: { type: 'string' }, code: { type: 'string' } } },
  Message: {
    type: 'object',
    required: ['message', 'name'],
    properties: { message: { type: 'string' }, name: { type: 'string' } },
  },
  Forward: {
    type: 'object',
    required: ['host_port', 'guest_port', 'proto', 'kind'],
    properties: {
      host_port: { type: 'integer' },
      guest_port: { type: 'integer' },
      proto: { type: 'string', enum: ['tcp', 'udp'] },
      kind: { type: 'string', enum: ['boot', 'live'] },
      pid: { type: 'integer' },
    },
  },
  PortForward: {
    type: 'object',
    required: ['guest_port'],
    properties: {
      host_port: { type: 'integer', description: '0 allocates a free host port' },
      guest_port: { type: 'integer' },
      proto: { type: 'string', enum: ['tcp', 'udp'], default: 'tcp' },
    },
  },
  LiveForward: {
    type: 'object',
    required: ['host_port', 'guest_port'],
    properties: { host_port: { type: 'integer' }, guest_port: { type: 'integer' }, pid: { type: 'integer' } },
  },
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
      mounts: { type: 'array', items: ref('Mount') },
      metrics_enabled: { type: 'boolean' },
      from: { type: 'string', description: 'clone this template (a persistent vm, stopped or suspended)' },
      from_pool: { type: 'boolean', description: 'claim a warm pool member' },
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
      phase: {
        type: 'string',
        enum: [
          'capture',
          'accepted',
          'image',
          'disk',
          'boot',
          'restore',
          'wait_ssh',
          'wait_agent',
          'userdata',
          'bootstrap',
          'ready',
          'error',
        ],
      },
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
  Secret: {
    type: 'object',
    required: ['name', 'size', 'mode', 'created_at', 'updated_at'],
    properties: {
      name: { type: 'string' },
      size: { type: 'integer' },
      mode: { type: 'string' },
      created_at: { type: 'string' },
      updated_at: { type: 'string' },
    },
  },
  SecretInput: {
    type: 'object',
    required: ['name'],
    properties: {
      name: { type: 'string' },
      value: { type: 'string' },
      data_base64: { type: 'string' },
      mode: { type: 'string', default: '0600' },
    },
  },
};

/** Operations described but not served yet; each carries `x-svc-planned: true`. */
export const PLANNED = new Set<string>([]);

function markPlanned(paths: Record<string, Record<string, Schema>>): Record<string, Record<string, Schema>> {
  for (const [path, ops] of Object.entries(paths)) {
    for (const [method, o] of Object.entries(ops)) {
      if (PLANNED.has(`${method} ${path}`)) o['x-svc-planned'] = true;
    }
  }
  return paths;
}

/** What every create answers to (POST /vms, a clone, a fork): progress, its wait mode, its deadline. */
const createParams = [
  q('stream', { type: 'string', enum: ['1'] }),
  q('wait', { type: 'string', enum: ['auto', 'ssh', 'agent', 'userdata', 'bootstrap', 'true', '1'] }),
  q('timeout', { type: 'string' }, 'duration such as 90s or 3m'),
];

export function openApiDocument(version: string): Record<string, unknown> {
  const lifecycle = (summary: string, ok: unknown) => ({
    post: op(
      summary,
      { '200': ok, '400': err('not allowed from the current state'), '404': err('no such vm') },
      { parameters: [nameParam] },
    ),
  });
  return {
    openapi: '3.0.3',
    info: {
      title: 'svc daemon API',
      version: '0.2.2',
      description: `svcd ${version}: lightweight QEMU VMs and their guest agents.`,
    },
    servers: [{ url: 'http://127.0.0.1:7474' }],
    security: [{ bearer: [] }],
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: {
        ...schemas,
        ...SYSTEM_SCHEMAS,
        ...IMAGE_SCHEMAS,
        ...EGRESS_SCHEMAS,
        ...GUEST_SCHEMAS,
        ...PROCESS_SCHEMAS,
        ...CLUSTER_SCHEMAS,
      },
    },
    paths: markPlanned({
      ...PROCESS_PATHS,
      ...CLUSTER_PATHS,
      ...GUEST_PATHS,
      ...EGRESS_PATHS,
      ...SYSTEM_PATHS,
      ...IMAGE_PATHS,
      '/vms': {
        get: op('List VMs', { '200': json('VMs', { type: 'array', items: ref('Instance') }) }),
        post: op(
          'Create a VM',
          {
            '201': json('the ready VM', ref('Instance')),
            '200': {
              description: 'progress stream (stream=1 or Accept: application/x-ndjson)',
              content: { 'application/x-ndjson': { schema: ref('CreateProgressEvent') } },
            },
            '400': err('invalid request'),
            '409': err('name taken'),
            '413': err('body too large'),
            '429': err('a resource cap would be exceeded'),
            '500': err('the create failed; nothing is left behind'),
            '504': err('the create deadline passed'),
            '507': err('no space left under the data dir (insufficient_storage); nothing is left behind'),
          },
          {
            parameters: createParams,
            requestBody: jsonBody(ref('CreateRequest'), false),
          },
        ),
      },
      '/vms/{name}': {
        get: op(
          'Get a VM',
          { '200': json('the VM', ref('Instance')), '404': err('no such vm') },
          { parameters: [nameParam] },
        ),
        delete: op(
          'Delete a VM, whatever its state',
          { '200': message, '404': err('no such vm') },
          { parameters: [nameParam] },
        ),
      },
      '/vms/{name}/fork': {
        post: op(
          'Fork a running or paused VM: copies of it as it is now, each its own machine; all of them or none (docs/forks.md)',
          {
            '201': json('the source, how long it was held, and the ready forks', {
              type: 'object',
              required: ['source', 'paused_ms', 'vms'],
              properties: {
                source: { type: 'string' },
                paused_ms: { type: 'integer' },
                vms: { type: 'array', items: ref('Instance') },
              },
            }),
            '200': {
              description: "progress stream (stream=1): a capture line, then every fork's create progress",
              content: { 'application/x-ndjson': { schema: ref('CreateProgressEvent') } },
            },
            '400': err('invalid request, or a vm that does not run or has no agent'),
            '404': err('no such vm'),
            '409': err('a name taken'),
            '429': err('a resource cap would be exceeded'),
            '500': err('the capture or a fork failed (no fork is left)'),
            '501': err('the driver cannot fork, or the svc-fdpass helper is not built'),
          },
          {
            parameters: [nameParam, ...createParams],
            requestBody: jsonBody(
              {
                type: 'object',
                additionalProperties: false,
                properties: {
                  count: { type: 'integer', minimum: 1, maximum: 100 },
                  names: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 100 },
                  persistent: { type: 'boolean' },
                  tags: { type: 'object', additionalProperties: { type: 'string' } },
                },
              },
              false,
            ),
          },
        ),
      },
      '/vms/{name}/clone': {
        post: op(
          'Clone a stopped or suspended persistent VM (from its snapshot when it has one)',
          {
            '201': json('the ready clone', ref('Instance')),
            '200': {
              description: 'progress stream (stream=1)',
              content: { 'application/x-ndjson': { schema: ref('CreateProgressEvent') } },
            },
            '400': err('invalid request or not a template'),
            '409': err('name taken'),
            '429': err('a resource cap would be exceeded'),
            '500': err('the clone failed'),
            '504': err('deadline passed'),
          },
          {
            parameters: [nameParam, ...createParams],
            requestBody: jsonBody(
              {
                type: 'object',
                properties: {
                  name: { type: 'string' },
                  persistent: { type: 'boolean' },
                  tags: { type: 'object', additionalProperties: { type: 'string' } },
                  forwards: { type: 'array', items: ref('PortForward') },
                  metrics_enabled: { type: 'boolean' },
                },
              },
              false,
            ),
          },
        ),
      },
      '/pool': {
        get: op('The warm pool', {
          '200': json('pool', {
            type: 'object',
            properties: {
              template: { type: 'string' },
              size: { type: 'integer' },
              running: { type: 'boolean' },
              ready: { type: 'integer' },
              members: {
                type: 'array',
                items: { type: 'object', properties: { name: { type: 'string' }, status: { type: 'string' } } },
              },
            },
          }),
        }),
      },
      '/vms/{name}/start': lifecycle(
        'Start a stopped (or failed) persistent VM',
        json('the running VM', ref('Instance')),
      ),
      '/vms/{name}/shutdown': lifecycle('Shut down; ephemeral VMs are removed', message),
      '/vms/{name}/pause': lifecycle('Pause the guest CPUs', message),
      '/vms/{name}/resume': lifecycle('Resume a paused VM', message),
      '/vms/{name}/suspend': lifecycle('Save state and stop the process (persistent VMs)', message),
      '/vms/{name}/restore': lifecycle(
        'Start a suspended VM from its saved state',
        json('the running VM', ref('Instance')),
      ),
      '/vms/{name}/metrics': {
        get: op(
          'Guest stats history (metrics.ring), oldest first',
          { '200': json('history', ref('MetricsHistory')), '404': err('no such vm') },
          {
            parameters: [
              nameParam,
              q('since', { type: 'integer' }, 't_ms lower bound'),
              q('limit', { type: 'integer' }),
            ],
          },
        ),
      },
      '/vms/{name}/forwards': {
        post: op(
          'Open a live SSH forward from 127.0.0.1:host_port',
          {
            '201': json('the forward', ref('LiveForward')),
            '400': err('bad forward'),
            '404': err('no such vm'),
            '409': err('host port busy'),
            '503': err('vm not running'),
          },
          {
            parameters: [nameParam],
            requestBody: jsonBody(ref('PortForward')),
          },
        ),
      },
      '/vms/{name}/forwards/{hostPort}': {
        delete: op(
          'Close a live forward',
          {
            '200': json('closed', {
              type: 'object',
              properties: { message: { type: 'string' }, name: { type: 'string' }, host_port: { type: 'integer' } },
            }),
            '404': err('no such forward'),
          },
          { parameters: [nameParam, { name: 'hostPort', in: 'path', required: true, schema: { type: 'integer' } }] },
        ),
      },
      '/secrets': {
        get: op('List secret metadata', { '200': json('secrets', { type: 'array', items: ref('Secret') }) }),
        post: op(
          'Create or replace a secret',
          { '200': json('the secret record', ref('Secret')), '400': err('invalid secret') },
          { requestBody: jsonBody(ref('SecretInput')) },
        ),
      },
      '/secrets/{name}': {
        delete: op(
          'Delete a secret',
          { '200': message, '404': err('no such secret') },
          { parameters: [{ ...nameParam, schema: { type: 'string' } }] },
        ),
      },
      '/vms/{name}/secrets/{secretName}': {
        post: op(
          'Materialize a host secret in the guest',
          {
            '200': json('where it was written', {
              type: 'object',
              properties: {
                name: { type: 'string' },
                secret: { type: 'string' },
                path: { type: 'string' },
                mode: { type: 'string' },
              },
            }),
            ...proxyErrors,
          },
          {
            parameters: [nameParam, { name: 'secretName', in: 'path', required: true, schema: { type: 'string' } }],
            requestBody: jsonBody(
              {
                type: 'object',
                properties: {
                  path: { type: 'string' },
                  mode: { type: 'string' },
                  uid: { type: 'integer' },
                  gid: { type: 'integer' },
                },
              },
              false,
            ),
          },
        ),
      },
      '/vms/{name}/ttl': {
        put: op(
          "Set the VM's lifetime from now, or end it (ttl null); at its end the VM is deleted or suspended",
          {
            '200': json('the vm', ref('Instance')),
            '400': err('not a ttl'),
            '404': err('no such vm'),
          },
          {
            parameters: [nameParam],
            requestBody: jsonBody(ref('LifetimeChange')),
          },
        ),
      },
      '/vms/{name}/logs': {
        get: op(
          'The guest serial console log',
          {
            '200': {
              description: 'log text; with follow=true it streams until the client goes away',
              content: { 'text/plain': { schema: { type: 'string' } } },
            },
            '404': err('no such vm'),
          },
          {
            parameters: [
              nameParam,
              q('tail', { type: 'integer' }, 'last N bytes'),
              q('follow', { type: 'boolean', default: false }),
            ],
          },
        ),
      },
    }),
  };
}
