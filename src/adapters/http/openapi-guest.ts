import { err, json, nameParam, op, pathQ, proxyErrors, q, ref, jsonBody, type Schema } from './openapi-kit.js';

const sshInfo = {
  type: 'object',
  required: ['host_keys'],
  properties: {
    host_keys: {
      type: 'array',
      items: { type: 'string' },
      description: 'as known_hosts takes them: TYPE BASE64 (ed25519 when the server has one)',
    },
  },
};

/** The OpenAPI description of what the daemon does in a guest through its agent: health, stats, exec, cp, fs, shell, ports. */

export const GUEST_SCHEMAS: Record<string, Schema> = {
  AgentHealth: {
    type: 'object',
    required: ['hostname', 'agent_version', 'agent_uptime_sec', 'userdata_ran'],
    properties: {
      hostname: { type: 'string' },
      agent_version: { type: 'string' },
      agent_uptime_sec: { type: 'number' },
      userdata_ran: { type: 'boolean' },
      readiness: { type: 'object', additionalProperties: { type: 'string' } },
      features: { type: 'array', items: { type: 'string' }, description: 'what this agent does beyond older ones' },
    },
  },
  Stats: {
    type: 'object',
    required: ['uptime_sec', 'load1', 'load5', 'load15', 'mem_total_bytes', 'mem_available_bytes'],
    properties: Object.fromEntries(
      [
        'uptime_sec',
        'load1',
        'load5',
        'load15',
        'cpus',
        'mem_total_bytes',
        'mem_available_bytes',
        'disk_total_bytes',
        'disk_free_bytes',
      ].map((k) => [k, { type: 'number' }]),
    ),
  },
  MetricsHistory: {
    type: 'object',
    required: ['name', 'enabled', 'interval_sec', 'capacity', 'points'],
    properties: {
      name: { type: 'string' },
      enabled: { type: 'boolean' },
      interval_sec: { type: 'number' },
      capacity: { type: 'integer' },
      points: {
        type: 'array',
        items: {
          type: 'object',
          properties: Object.fromEntries(
            [
              't_ms',
              'uptime_sec',
              'load1',
              'mem_total_bytes',
              'mem_available_bytes',
              'disk_total_bytes',
              'disk_free_bytes',
            ].map((k) => [k, { type: 'number' }]),
          ),
        },
      },
    },
  },
  ExecResult: {
    type: 'object',
    required: ['stdout', 'stderr', 'exit_code'],
    properties: {
      stdout: { type: 'string' },
      stderr: { type: 'string' },
      exit_code: { type: 'integer' },
      error: { type: 'string' },
      truncated: { type: 'boolean' },
    },
  },
  ExecFrame: {
    type: 'object',
    required: ['type', 't'],
    properties: {
      type: { type: 'string', enum: ['started', 'stdout', 'stderr', 'exit', 'error'] },
      t: { type: 'string' },
      pid: { type: 'integer' },
      data: { type: 'string' },
      exit_code: { type: 'integer' },
      error: { type: 'string' },
      code: {
        type: 'string',
        description:
          'on an error frame the daemon ends a broken stream with: the error code (agent_unavailable, agent_failure)',
      },
    },
  },
  FSInfo: {
    type: 'object',
    required: ['name', 'path', 'type', 'size', 'mode', 'mtime'],
    properties: {
      name: { type: 'string' },
      path: { type: 'string' },
      type: { type: 'string', enum: ['file', 'directory', 'symlink', 'other'] },
      size: { type: 'integer' },
      mode: { type: 'string' },
      mtime: { type: 'string', format: 'date-time' },
      target: { type: 'string' },
    },
  },
};

export const GUEST_PATHS: Record<string, Record<string, Schema>> = {
  '/vms/{name}/agent/health': {
    get: op(
      'Guest agent health',
      { '200': json('health', ref('AgentHealth')), '404': err('no such vm'), '503': err('agent unavailable') },
      { parameters: [nameParam] },
    ),
  },
  '/vms/{name}/agent/deploy': {
    post: op(
      'Deploy or refresh the agent over SSH',
      {
        '200': json('deployed', {
          type: 'object',
          properties: { name: { type: 'string' }, agent_version: { type: 'string' } },
        }),
        ...proxyErrors,
      },
      { parameters: [nameParam] },
    ),
  },
  '/vms/{name}/ssh': {
    get: op(
      "The host key of the guest's SSH server, read through its agent, for a client to pin",
      {
        '200': json('its host key', sshInfo),
        ...proxyErrors,
        '409': err('nothing listens on port 22 in the guest'),
      },
      { parameters: [nameParam] },
    ),
  },
  '/vms/{name}/ssh/keys': {
    post: op(
      "Let a public key log in as a user of the guest: added once to the user's ~/.ssh/authorized_keys, through the agent",
      {
        '200': json('the key may log in; the host key to pin', {
          type: 'object',
          required: ['user', 'added', 'host_keys'],
          properties: {
            user: { type: 'string' },
            added: { type: 'boolean', description: 'false when the key was there already' },
            ...sshInfo.properties,
          },
        }),
        ...proxyErrors,
        '409': err('nothing listens on port 22 in the guest'),
      },
      {
        parameters: [nameParam],
        requestBody: jsonBody({
          type: 'object',
          required: ['public_key'],
          additionalProperties: false,
          properties: {
            public_key: {
              type: 'string',
              description: 'one line of a .pub file: TYPE BASE64 [COMMENT], without options',
            },
            user: { type: 'string', description: 'a user of the guest, by name or number (default root)' },
          },
        }),
      },
    ),
  },
  '/vms/{name}/stats': {
    get: op(
      'Guest stats snapshot',
      { '200': json('stats', ref('Stats')), '404': err('no such vm'), '503': err('agent unavailable') },
      { parameters: [nameParam] },
    ),
  },
  '/vms/{name}/exec': {
    post: op(
      'Run a command in the guest',
      {
        '200': {
          description: 'ExecResult, or NDJSON frames with buffered=false',
          content: {
            'application/json': { schema: ref('ExecResult') },
            'application/x-ndjson': { schema: ref('ExecFrame') },
          },
        },
        ...proxyErrors,
      },
      {
        parameters: [
          nameParam,
          q('cmd', { type: 'string' }, 'command', true),
          {
            name: 'args',
            in: 'query',
            schema: { type: 'array', items: { type: 'string' } },
            style: 'form',
            explode: true,
          },
          q('buffered', { type: 'string', enum: ['true', 'false'], default: 'true' }),
          q('cwd', { type: 'string' }),
          q(
            'user',
            { type: 'string' },
            'a user of the guest (name or number): its uid, gid, HOME, USER, LOGNAME, SHELL, and its home as the cwd; not with uid',
          ),
          q('uid', { type: 'integer' }, "run as this uid (its passwd user's gid, HOME, USER, LOGNAME, SHELL)"),
          q('gid', { type: 'integer' }),
          q('timeout', { type: 'string' }),
          q('encoding', { type: 'string', enum: ['utf8', 'base64'] }),
          {
            name: 'env',
            in: 'query',
            description:
              "NAME=VALUE, repeated: variables of the command's environment (over the agent's own; with user, over that user's HOME, USER, LOGNAME, SHELL); a name given twice takes its last value; at most 256",
            schema: { type: 'array', items: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*=' } },
            style: 'form',
            explode: true,
          },
        ],
        requestBody: {
          required: false,
          description: 'stdin of the command',
          content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
        },
      },
    ),
  },
  '/vms/{name}/cp': {
    put: op(
      'Write a file or a tar into the guest',
      { '204': { description: 'written' }, ...proxyErrors },
      {
        parameters: [
          nameParam,
          pathQ,
          q('mode', { type: 'string', enum: ['binary', 'tar'] }),
          q('permissions', { type: 'string' }),
          q(
            'uid',
            { type: 'integer' },
            'the owner of what is written and of the folders made for it; every entry of a tar',
          ),
          q('gid', { type: 'integer' }, 'its group, likewise'),
        ],
        requestBody: {
          required: true,
          content: {
            'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
            'application/x-tar': { schema: { type: 'string', format: 'binary' } },
          },
        },
      },
    ),
    get: op(
      'Read a file or a tar from the guest',
      {
        '200': {
          description: 'bytes',
          content: {
            'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
            'application/x-tar': { schema: { type: 'string', format: 'binary' } },
          },
        },
        ...proxyErrors,
      },
      { parameters: [nameParam, pathQ, q('mode', { type: 'string', enum: ['binary', 'tar'] })] },
    ),
  },
  '/vms/{name}/fs/readdir': {
    get: op(
      'List a guest directory',
      { '200': json('entries', { type: 'array', items: ref('FSInfo') }), ...proxyErrors },
      { parameters: [nameParam, pathQ] },
    ),
  },
  '/vms/{name}/fs/stat': {
    get: op(
      'Stat a guest path (links not followed)',
      { '200': json('entry', ref('FSInfo')), ...proxyErrors },
      { parameters: [nameParam, pathQ] },
    ),
  },
  '/vms/{name}/fs/mkdir': {
    post: op(
      'Make a guest directory',
      { '204': { description: 'made' }, ...proxyErrors },
      {
        parameters: [nameParam],
        requestBody: jsonBody({
          type: 'object',
          required: ['path'],
          properties: { path: { type: 'string' }, recursive: { type: 'boolean' }, mode: { type: 'string' } },
        }),
      },
    ),
  },
  '/vms/{name}/fs/symlink': {
    post: op(
      'Make a guest symlink',
      { '204': { description: 'made' }, ...proxyErrors },
      {
        parameters: [nameParam],
        requestBody: jsonBody({
          type: 'object',
          required: ['path', 'target'],
          properties: { path: { type: 'string' }, target: { type: 'string' } },
        }),
      },
    ),
  },
  '/vms/{name}/fs/remove': {
    delete: op(
      'Remove a guest path',
      { '204': { description: 'removed' }, ...proxyErrors },
      { parameters: [nameParam, pathQ, q('recursive', { type: 'boolean', default: false })] },
    ),
  },
  '/vms/{name}/shell': {
    get: op(
      'Interactive shell (WebSocket upgrade)',
      {
        '101': {
          description: 'switching to WebSocket: binary frames carry terminal bytes, text {type:"resize",cols,rows}',
        },
        '400': err('bad input (a size, a relative shell or cwd, shell with cmd, a bad env)'),
        '404': err('no such vm, or no such command or directory in the guest'),
        '501': err("the VM's agent is older than a command in a terminal (cmd, cwd, env): svc agent deploy"),
        '503': err('agent unavailable'),
      },
      {
        parameters: [
          nameParam,
          q('cols', { type: 'integer', minimum: 1, maximum: 1000 }),
          q('rows', { type: 'integer', minimum: 1, maximum: 1000 }),
          q('shell', { type: 'string' }, 'an absolute path: the shell to open; not with cmd'),
          q(
            'user',
            { type: 'string' },
            'a user of the guest (name or number) to open it as, in its home with its login shell; default root',
          ),
          q(
            'cmd',
            { type: 'string' },
            "a command to run in the terminal instead of a shell (a path, or a name in the PATH); the socket's exit is its exit code",
          ),
          {
            name: 'args',
            in: 'query',
            schema: { type: 'array', items: { type: 'string' } },
            style: 'form',
            explode: true,
          },
          q('cwd', { type: 'string' }, 'an absolute path to start in'),
          {
            name: 'env',
            in: 'query',
            description: "NAME=VALUE, repeated: variables of the terminal's environment, as exec's env",
            schema: { type: 'array', items: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*=' } },
            style: 'form',
            explode: true,
          },
        ],
      },
    ),
  },
  '/vms/{name}/ports/{port}': {
    get: op(
      "A TCP port on the guest's loopback (upgrade: tcp)",
      {
        '101': {
          description:
            "switching to the port's bytes (Upgrade: tcp): the connection then carries TCP to 127.0.0.1:PORT (or ::1) in the guest, through its agent",
        },
        '400': err('not an Upgrade: tcp, or a bad port'),
        '404': err('no such vm, or nothing listens on the port in the guest'),
        '503': err('agent unavailable'),
      },
      {
        parameters: [
          nameParam,
          { name: 'port', in: 'path', required: true, schema: { type: 'integer', minimum: 1, maximum: 65535 } },
        ],
      },
    ),
  },
};
