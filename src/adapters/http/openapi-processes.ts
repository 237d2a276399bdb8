import { err, json, nameParam, op, proxyErrors, q, ref, jsonBody, type Schema } from './openapi-kit.js';

/** The OpenAPI description of durable processes and watches (docs/processes.md). */

const idParam = {
  name: 'id',
  in: 'path',
  required: true,
  description: 'process id (p3) or tag',
  schema: { type: 'string', maxLength: 64 },
};
const watchIdParam = {
  ...idParam,
  description: 'watch id (w2)',
  schema: { type: 'string', pattern: '^w[1-9][0-9]*$' },
};
const stream = { type: 'string', enum: ['stdout', 'stderr', 'pty'] };
const notKept = {
  '501': err('the guest keeps no processes (an agent built without svc-keep, or no agent), or its agent predates tail'),
};
const errors = { ...proxyErrors, ...notKept };

export const PROCESS_SCHEMAS: Record<string, Schema> = {
  ProcessStart: {
    type: 'object',
    required: ['cmd'],
    additionalProperties: false,
    properties: {
      cmd: { type: 'string' },
      args: { type: 'array', items: { type: 'string' } },
      env: { type: 'object', additionalProperties: { type: 'string' } },
      cwd: { type: 'string', description: 'absolute; default the user’s home' },
      user: { type: 'string', description: 'a user (name or number) in the guest; default the agent’s (root)' },
      tag: { type: 'string', maxLength: 64, description: 'a name to find it by; one running process per tag' },
      pty: {
        type: 'object',
        properties: {
          cols: { type: 'integer', minimum: 1, maximum: 1000 },
          rows: { type: 'integer', minimum: 1, maximum: 1000 },
        },
        description: 'a terminal: one output stream, `pty`',
      },
      stdin: { type: 'boolean', default: false, description: 'keep its input open for POST .../stdin' },
      restart: {
        type: 'string',
        enum: ['no', 'always', 'on-failure'],
        default: 'no',
        description:
          'start it again when it ends (on-failure: unless with exit code 0), after 100 ms doubled each time up to 30 s; its output goes on in the same journal. A signal INT, QUIT, KILL or TERM sent through svc ends the restarts. Not with pty or stdin',
      },
      max_restarts: { type: 'integer', minimum: 0, description: 'with restart: at most this many times' },
    },
  },
  ProcessInfo: {
    type: 'object',
    required: ['id', 'pid', 'cmd', 'args', 'pty', 'stdin', 'started_at', 'state', 'bytes'],
    properties: {
      id: { type: 'string' },
      pid: { type: 'integer' },
      tag: { type: 'string' },
      cmd: { type: 'string' },
      args: { type: 'array', items: { type: 'string' } },
      pty: { type: 'boolean' },
      stdin: { type: 'boolean' },
      started_at: { type: 'string', format: 'date-time' },
      started_in: { type: 'string', description: 'the VM it was started in, when not this one (a clone’s copy)' },
      state: { type: 'string', enum: ['running', 'ended'] },
      bytes: {
        type: 'object',
        additionalProperties: { type: 'integer' },
        description: 'bytes written so far per stream',
      },
      exit_code: { type: 'integer' },
      signal: { type: 'string' },
      reason: { type: 'string', enum: ['exit', 'signal', 'reboot', 'lost'] },
      ended_at: { type: 'string', format: 'date-time' },
      restart: { type: 'string', enum: ['always', 'on-failure'], description: 'its restart policy, when it has one' },
      max_restarts: { type: 'integer' },
      restarts: { type: 'integer', description: 'times it was started again so far (`pid` is the current run’s)' },
      timeline: {
        type: 'string',
        description:
          'the VM’s timeline `bytes` are on (t0 until a revert to a snapshot starts another): give it back with from as timeline=',
      },
    },
  },
  OutputFrame: {
    description:
      'One line of output: bytes of a stream at a byte offset (UTF-8 text, or base64 with `encoding`); a `truncated` marker where bytes are no longer kept; or, last, how it ended. A `tail` read begins with `start`; a read whose timeline the VM has left begins with `reverted`',
    oneOf: [
      {
        type: 'object',
        required: ['stream', 'offset', 'data'],
        properties: {
          stream,
          offset: { type: 'integer' },
          data: { type: 'string' },
          encoding: { type: 'string', enum: ['base64'] },
        },
      },
      {
        type: 'object',
        required: ['truncated'],
        properties: { truncated: { type: 'object', properties: { stream, before: { type: 'integer' } } } },
      },
      {
        type: 'object',
        required: ['reason', 'ended_at'],
        properties: {
          reason: { type: 'string', enum: ['exit', 'signal', 'reboot', 'lost'] },
          exit_code: { type: 'integer' },
          signal: { type: 'string' },
          ended_at: { type: 'string' },
        },
      },
      {
        type: 'object',
        required: ['start'],
        description: "a tail read's first line: the byte offset each stream's last lines start at",
        properties: { start: { type: 'object', additionalProperties: { type: 'integer' } } },
      },
      {
        type: 'object',
        required: ['reverted'],
        description:
          'the first line of a read whose timeline the VM has left (a revert to a snapshot): from these offsets (per stream, or `all`) on the guest wrote other bytes than the reader may have read; the read starts there',
        properties: {
          reverted: {
            type: 'object',
            required: ['timeline', 'from'],
            properties: {
              timeline: { type: 'string' },
              from: { type: 'object', additionalProperties: { type: 'integer' } },
            },
          },
        },
      },
    ],
  },
  WatchEvent: {
    type: 'object',
    required: ['cursor', 'type'],
    properties: {
      cursor: {
        type: 'string',
        description: 'resume after this event with from=CURSOR (w3:1200; w3:1200@t1a2b... after a revert)',
      },
      type: {
        type: 'string',
        enum: ['watching', 'create', 'write', 'remove', 'rename', 'chmod', 'overflow', 'reverted'],
        description:
          'reverted: first, for a cursor of a timeline the VM has left (a revert); events go on from its cursor',
      },
      path: { type: 'string' },
      to: { type: 'string' },
      watch: { type: 'string' },
      recursive: { type: 'boolean' },
      entry: {
        type: 'object',
        properties: { type: { type: 'string' }, size: { type: 'integer' }, mode: { type: 'string' } },
      },
    },
  },
  WatchInfo: {
    type: 'object',
    required: ['id', 'path', 'recursive', 'started_at', 'state'],
    properties: {
      id: { type: 'string' },
      path: { type: 'string' },
      recursive: { type: 'boolean' },
      started_at: { type: 'string' },
      state: { type: 'string', enum: ['running', 'ended'] },
      cursor: { type: 'string', description: 'where its events end now: resume there for only those to come' },
    },
  },
};

const removed = json('removed', {
  allOf: [ref('Message'), { type: 'object', properties: { id: { type: 'string' } } }],
});

export const PROCESS_PATHS: Record<string, Record<string, Schema>> = {
  '/vms/{name}/processes': {
    post: op(
      'Start a process that belongs to the guest, not to this call (docs/processes.md)',
      { '201': json('started', ref('ProcessInfo')), '409': err('a running process has this tag'), ...errors },
      {
        parameters: [nameParam],
        requestBody: jsonBody(ref('ProcessStart')),
      },
    ),
    get: op(
      "The VM's processes: running, and the latest that ended",
      { '200': json('processes', { type: 'array', items: ref('ProcessInfo') }), ...errors },
      { parameters: [nameParam] },
    ),
  },
  '/vms/{name}/processes/{id}': {
    get: op(
      'One process, by id or tag',
      { '200': json('the process', ref('ProcessInfo')), ...errors },
      { parameters: [nameParam, idParam] },
    ),
    delete: op(
      'Kill it if it runs, and forget it and its output',
      { '200': removed, ...errors },
      { parameters: [nameParam, idParam] },
    ),
  },
  '/vms/{name}/processes/{id}/output': {
    get: op(
      'Its output from a byte offset per stream, or from its last lines (NDJSON), following while follow=1 until it ends',
      {
        '200': {
          description: 'frames',
          headers: {
            'x-svc-timeline': {
              description: 'the timeline the offsets of these frames are on (the next read’s timeline=)',
              schema: { type: 'string' },
            },
          },
          content: { 'application/x-ndjson': { schema: ref('OutputFrame') } },
        },
        ...errors,
      },
      {
        parameters: [
          nameParam,
          idParam,
          q(
            'timeline',
            { type: 'string' },
            'the timeline `from` is on (a ProcessInfo’s, or an earlier answer’s x-svc-timeline): when the VM has left it, the read starts no later than what the two share, and says so with a `reverted` line',
          ),
          q(
            'from',
            { type: 'string' },
            'N (every stream from byte N) or stdout:N,stderr:M; default 0: everything kept',
          ),
          q(
            'tail',
            { type: 'integer', minimum: 0, maximum: 1_000_000 },
            "instead of from: each stream's last N lines, as tail -n counts them (0: only what comes next); the first line says where they start. 501 from an agent that predates it",
          ),
          q('follow', { type: 'boolean', default: false }),
        ],
      },
    ),
  },
  '/vms/{name}/processes/{id}/stdin': {
    post: op(
      'Bytes for its input (started with stdin: true); eof=1 ends the input after them',
      { '204': { description: 'passed on' }, ...errors },
      {
        parameters: [nameParam, idParam, q('eof', { type: 'boolean', default: false })],
        requestBody: { content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } } },
      },
    ),
  },
  '/vms/{name}/processes/{id}/signal': {
    post: op(
      'Send a signal to its process group',
      { '204': { description: 'sent' }, ...errors },
      {
        parameters: [nameParam, idParam],
        requestBody: {
          content: {
            'application/json': {
              schema: {
                type: 'object',
                properties: { signal: { type: 'string', default: 'SIGTERM', description: 'SIGTERM, TERM or 15' } },
              },
            },
          },
        },
      },
    ),
  },
  '/vms/{name}/processes/{id}/resize': {
    post: op(
      'Resize its terminal',
      { '204': { description: 'resized' }, ...errors },
      {
        parameters: [nameParam, idParam],
        requestBody: jsonBody({
          type: 'object',
          required: ['cols', 'rows'],
          properties: { cols: { type: 'integer' }, rows: { type: 'integer' } },
        }),
      },
    ),
  },
  '/vms/{name}/watch': {
    get: op(
      'File changes (NDJSON): a new watch on path, or an existing one resumed after a cursor',
      {
        '200': { description: 'events', content: { 'application/x-ndjson': { schema: ref('WatchEvent') } } },
        '429': err('64 watches run already'),
        ...errors,
      },
      {
        parameters: [
          nameParam,
          q('path', { type: 'string' }, 'absolute guest path (a new watch)'),
          q('recursive', { type: 'boolean', default: false }),
          q('from', { type: 'string' }, 'a cursor (w2:1200): resume that watch after it'),
        ],
      },
    ),
  },
  '/vms/{name}/watches': {
    get: op(
      'The VM’s watches',
      { '200': json('watches', { type: 'array', items: ref('WatchInfo') }), ...errors },
      { parameters: [nameParam] },
    ),
  },
  '/vms/{name}/watches/{id}': {
    delete: op(
      'End a watch and forget its events',
      { '200': removed, ...errors },
      { parameters: [nameParam, watchIdParam] },
    ),
  },
};
