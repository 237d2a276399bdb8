/**
 * The OpenAPI description of the daemon's own routes: health, info, metrics, this document, the
 * activity log, events, the dashboard and MCP.
 */
import { err, json, op, q, ref, jsonBody, type Schema } from './openapi-kit.js';

export const SYSTEM_SCHEMAS: Record<string, Schema> = {
  ActivityEvent: {
    type: 'object',
    required: ['id', 't', 'action', 'target', 'status', 'duration_ms'],
    properties: {
      id: { type: 'integer' },
      t: { type: 'string', format: 'date-time' },
      action: { type: 'string' },
      target: { type: 'string' },
      status: { type: 'string', enum: ['ok', 'error'] },
      duration_ms: { type: 'integer' },
      message: { type: 'string' },
    },
  },
  UiSession: {
    type: 'object',
    required: ['token_required', 'authenticated'],
    properties: {
      token_required: { type: 'boolean' },
      authenticated: { type: 'boolean' },
      session: { type: 'string', description: 'the new session id (log-in only); send it as X-Svc-Session' },
      expires_in_sec: { type: 'integer' },
    },
  },
};

export const SYSTEM_PATHS: Record<string, Record<string, Schema>> = {
  '/healthz': {
    get: {
      summary: 'Liveness; never needs a token',
      security: [],
      responses: { '200': json('ok', { type: 'object', properties: { status: { type: 'string' } } }) },
    },
  },
  '/info': {
    get: op('Daemon name and version', {
      '200': json('info', {
        type: 'object',
        required: ['name', 'version'],
        properties: {
          name: { type: 'string' },
          version: { type: 'string' },
          api_version: { type: 'string' },
          hypervisor: { type: 'string' },
        },
      }),
    }),
  },
  '/metrics': {
    get: op('Prometheus text exposition', {
      '200': { description: 'metrics', content: { 'text/plain': { schema: { type: 'string' } } } },
    }),
  },
  '/openapi.yaml': {
    get: op('This document', {
      '200': {
        description: 'the API description',
        content: { 'application/yaml': { schema: { type: 'string' } } },
      },
    }),
  },
  '/openapi.json': {
    get: op('This document (served as YAML, as the spec says)', {
      '200': {
        description: 'the API description',
        content: { 'application/yaml': { schema: { type: 'string' } } },
      },
    }),
  },
  '/activity': {
    get: op(
      'Control-plane activity, newest first',
      {
        '200': json('events', {
          type: 'object',
          properties: { events: { type: 'array', items: ref('ActivityEvent') } },
        }),
        '400': err('bad limit or since'),
      },
      {
        parameters: [
          q('limit', { type: 'integer', maximum: 1000 }),
          q('since', { type: 'integer' }, 'only events with a larger id'),
        ],
      },
    ),
  },
  '/events': {
    get: op('The VM change feed (NDJSON): a snapshot line, then a line per change, a ping every 15 s', {
      '200': {
        description: 'stream',
        content: {
          'application/x-ndjson': {
            schema: {
              type: 'object',
              required: ['event'],
              properties: {
                event: { type: 'string', enum: ['snapshot', 'vm', 'removed', 'ping', 'overflow'] },
                vms: { type: 'array', items: ref('Instance') },
                vm: ref('Instance'),
                name: { type: 'string' },
                message: { type: 'string' },
              },
            },
          },
        },
      },
    }),
  },
  '/ui': {
    get: {
      summary: 'The web dashboard at /ui/ (docs/dashboard.md); its files need no token',
      security: [],
      responses: {
        '200': { description: 'the page', content: { 'text/html': { schema: { type: 'string' } } } },
        '308': { description: 'from /ui to /ui/' },
      },
    },
  },
  '/ui/{file}': {
    get: {
      summary: 'A file of the dashboard (index.html, app.js, app.css)',
      security: [],
      parameters: [{ name: 'file', in: 'path', required: true, schema: { type: 'string' } }],
      responses: { '200': { description: 'the file' }, '404': err('not a dashboard file') },
    },
  },
  '/ui/session': {
    get: {
      summary: 'Does this browser need to log in?',
      security: [],
      responses: { '200': json('session', ref('UiSession')) },
    },
    post: {
      summary:
        'Log in: trade the token for a session id, sent after in the X-Svc-Session header (not a cookie: cookies reach every port of the host)',
      security: [],
      requestBody: jsonBody({ type: 'object', required: ['token'], properties: { token: { type: 'string' } } }),
      responses: {
        '200': json('logged in: `session` is the id', ref('UiSession')),
        '401': err('wrong token'),
        '403': err('from a foreign Origin'),
      },
    },
    delete: {
      summary: 'Log out: the session in X-Svc-Session ends',
      security: [],
      responses: { '204': { description: 'logged out' } },
    },
  },
  '/mcp': {
    post: op(
      'Model Context Protocol over Streamable HTTP (stateless): JSON-RPC in, JSON or an SSE stream out; docs/mcp.md',
      {
        '200': {
          description: 'a JSON-RPC answer, or text/event-stream with progress notifications then the answer',
        },
        '202': { description: 'a notification or response was accepted' },
        '400': err('not a JSON-RPC message'),
      },
      { requestBody: jsonBody({ type: 'object' }) },
    ),
    get: op('Not served: the endpoint is stateless', { '405': err('use POST') }),
    delete: op('Not served: the endpoint is stateless', { '405': err('use POST') }),
  },
};
