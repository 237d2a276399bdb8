/** The VMs' own paths of the OpenAPI description (openapi.ts): create, clone, fork, the pool, lifecycle, metrics, lifetime, logs. */
import { err, json, message, nameParam, op, q, ref, jsonBody, type Schema } from './openapi-kit.js';

/** What every create answers to (POST /vms, a clone, a fork): progress, its wait mode, its deadline. */
const createParams = [
  q('stream', { type: 'string', enum: ['1'] }),
  q('wait', { type: 'string', enum: ['auto', 'ssh', 'agent', 'userdata', 'bootstrap', 'true', '1'] }),
  q('timeout', { type: 'string' }, 'duration such as 90s or 3m'),
];

/** A lifecycle verb: POST with the VM's name (and `query`), `ok` its answer, `bad` its 400. */
const lifecycle = (
  summary: string,
  ok: unknown,
  query: unknown[] = [],
  bad = 'not allowed from the current state',
) => ({
  post: op(summary, { '200': ok, '400': err(bad), '404': err('no such vm') }, { parameters: [nameParam, ...query] }),
});

export const VM_PATHS: Record<string, Record<string, Schema>> = {
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
        '404': err('no such VM to clone (from), or it has no such snapshot (snapshot)'),
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
    patch: op(
      "Change a stopped VM's CPUs, memory or disk (a disk only grows) for its next boot",
      {
        '200': json('the vm', ref('Instance')),
        '400': err('not a shape; a disk smaller than it is; or the VM is not stopped, or has a saved state'),
        '404': err('no such vm'),
        '429': err('in a cluster, its node has no room for the new shape'),
        '501': err('the hypervisor cannot grow a disk'),
      },
      { parameters: [nameParam], requestBody: jsonBody(ref('ShapeChange')) },
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
      'Clone a stopped or suspended persistent VM (from its saved state when it has one), or any VM as one of its named snapshots holds it',
      {
        '201': json('the ready clone', ref('Instance')),
        '200': {
          description: 'progress stream (stream=1)',
          content: { 'application/x-ndjson': { schema: ref('CreateProgressEvent') } },
        },
        '400': err('invalid request or not a template'),
        '404': err('no such vm, or it has no such snapshot'),
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
              snapshot: {
                type: 'string',
                description: 'the VM as this named snapshot of it holds it, whatever it does now',
              },
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
  '/vms/{name}/start': lifecycle('Start a stopped (or failed) persistent VM', json('the running VM', ref('Instance'))),
  '/vms/{name}/shutdown': lifecycle('Shut down; ephemeral VMs are removed', message),
  '/vms/{name}/pause': lifecycle('Pause the guest CPUs', message),
  '/vms/{name}/resume': lifecycle('Resume a paused VM', message),
  '/vms/{name}/suspend': lifecycle('Save state and stop the process (persistent VMs)', message),
  '/vms/{name}/restore': lifecycle(
    'Start a suspended VM from its saved state',
    json('the running VM (paused with paused=true)', ref('Instance')),
    [
      q(
        'paused',
        { type: 'string', enum: ['true', 'false', '1', '0'] },
        'true: the guest stays paused once its state is loaded, and wakes at its resume (a restore that cold-boots runs it)',
      ),
    ],
    'not allowed from the current state, or paused not true or false',
  ),
  '/vms/{name}/metrics': {
    get: op(
      'Guest stats history (metrics.ring), oldest first',
      { '200': json('history', ref('MetricsHistory')), '404': err('no such vm') },
      {
        parameters: [nameParam, q('since', { type: 'integer' }, 't_ms lower bound'), q('limit', { type: 'integer' })],
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
          headers: {
            'X-Svc-Log-Offset': {
              description: 'the byte of the log the answer starts at: come back with from= it plus the bytes read',
              schema: { type: 'integer' },
            },
          },
          content: { 'text/plain': { schema: { type: 'string' } } },
        },
        '400': err('tail and from together, or not a whole number'),
        '404': err('no such vm'),
      },
      {
        parameters: [
          nameParam,
          q('tail', { type: 'integer' }, 'last N bytes'),
          q('from', { type: 'integer' }, 'from this byte of the log (not with tail)'),
          q('follow', { type: 'boolean', default: false }),
        ],
      },
    ),
  },
};
