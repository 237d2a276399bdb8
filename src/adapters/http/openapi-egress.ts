import { err, json, nameParam, op, q, ref, jsonBody, type Schema } from './openapi-kit.js';

/** The OpenAPI description of a VM's egress: its policy, the secrets put in on the way out, its log (docs/network.md). */

export const EGRESS_SCHEMAS: Record<string, Schema> = {
  EgressSecret: {
    type: 'object',
    additionalProperties: false,
    required: ['secret', 'hosts'],
    description:
      'A host secret put into requests on the way out, to its hosts only (docs/egress-secrets.md): the guest holds a placeholder.',
    properties: {
      secret: { type: 'string', description: 'a host secret (POST /secrets)' },
      hosts: {
        type: 'array',
        minItems: 1,
        maxItems: 64,
        items: { type: 'string', description: 'api.example.com, *.example.com or host.svc.internal' },
      },
      header: { type: 'string', description: 'only this request header carries the value (default: any)' },
      format: { type: 'string', description: 'what the header becomes, {value} the secret: "Bearer {value}"' },
      env: {
        type: 'string',
        description: "the guest variable holding the placeholder (default: the secret's name upper-cased)",
      },
      always: {
        type: 'boolean',
        description:
          "with header: set it on every request to the hosts, over the guest's own; no placeholder in the guest, no env",
      },
    },
  },
  EgressSecretBinding: {
    allOf: [
      ref('EgressSecret'),
      {
        type: 'object',
        required: ['placeholder'],
        properties: {
          placeholder: { type: 'string', description: 'what the guest holds in place of the value' },
          inherited: {
            type: 'array',
            items: { type: 'string' },
            description:
              'placeholders of the VM this one was copied from, still put in place (its processes came along)',
          },
        },
      },
    ],
  },
  EgressPolicy: {
    type: 'object',
    additionalProperties: false,
    description:
      "What the guest may reach (docs/network.md). Deny rules win; private, link-local and the host's addresses open only by a block rule; the host's loopback only by host:PORT.",
    properties: {
      default: { type: 'string', enum: ['allow', 'deny'], default: 'allow' },
      allow: {
        type: 'array',
        maxItems: 1000,
        items: {
          type: 'string',
          description:
            'a domain (pypi.org, *.github.com), an IP or CIDR with an optional :port ([v6]:port), or host:PORT',
        },
      },
      deny: { type: 'array', maxItems: 1000, items: { type: 'string' } },
      proxy: {
        type: 'object',
        additionalProperties: false,
        required: ['address'],
        description:
          'A SOCKS5 proxy that allowed outbound TCP is tunneled through, after the rules decide; a name that let a connection out is sent for the proxy to resolve. Fails closed: no direct connection when the proxy fails. UDP (DNS) is not tunneled.',
        properties: {
          address: { type: 'string', description: 'HOST:PORT, a name or an address ([v6]:port)' },
          username: { type: 'string', maxLength: 255, description: 'RFC 1929 username' },
          secret: {
            type: 'string',
            description: 'the host secret holding the password (needs username); the password is never shown',
          },
        },
      },
    },
  },
  EgressEvent: {
    type: 'object',
    required: ['t', 'vm', 'event', 'proto', 'decision', 'rule'],
    properties: {
      t: { type: 'string', format: 'date-time' },
      vm: { type: 'string' },
      event: { type: 'string', enum: ['dns', 'open', 'deny', 'close', 'secret'] },
      proto: { type: 'string', enum: ['tcp', 'udp', 'icmp', 'dns'] },
      decision: { type: 'string', enum: ['allow', 'deny'] },
      rule: { type: 'string' },
      name: { type: 'string' },
      addr: { type: 'string' },
      port: { type: 'integer' },
      answers: { type: 'array', items: { type: 'string' } },
      bytes_out: { type: 'integer' },
      bytes_in: { type: 'integer' },
      duration_ms: { type: 'integer' },
      repeats: { type: 'integer' },
      error: { type: 'string' },
      secret: { type: 'string', description: 'the egress secret a secret or deny entry is about (its name)' },
    },
  },
};

export const EGRESS_PATHS: Record<string, Record<string, Schema>> = {
  '/vms/{name}/egress': {
    get: op(
      "The VM's egress policy",
      { '200': json('the policy', ref('EgressPolicy')), '404': err('no such vm') },
      { parameters: [nameParam] },
    ),
    put: op(
      "Replace the VM's egress policy, live: open connections it forbids are closed",
      {
        '200': json('the policy as understood', ref('EgressPolicy')),
        '400': err('not a policy'),
        '404': err('no such vm'),
      },
      {
        parameters: [nameParam],
        requestBody: jsonBody(ref('EgressPolicy')),
      },
    ),
  },
  '/vms/{name}/egress/secrets': {
    get: op(
      "The VM's egress secrets: bindings and placeholders, never values",
      {
        '200': json('the bindings', { type: 'array', items: ref('EgressSecretBinding') }),
        '404': err('no such vm'),
      },
      { parameters: [nameParam] },
    ),
    put: op(
      "Replace the VM's egress secrets, live (a secret it had keeps its placeholder)",
      {
        '200': json('the bindings', { type: 'array', items: ref('EgressSecretBinding') }),
        '400': err('not a binding, or no such host secret'),
        '404': err('no such vm'),
      },
      {
        parameters: [nameParam],
        requestBody: jsonBody({ type: 'array', items: ref('EgressSecret') }),
      },
    ),
  },
  '/vms/{name}/egress/log': {
    get: op(
      "The VM's egress decisions, oldest first; with follow=true the last `limit`, then each as it happens (NDJSON)",
      {
        '200': {
          description: 'the log',
          content: {
            'application/json': {
              schema: {
                type: 'object',
                properties: { name: { type: 'string' }, events: { type: 'array', items: ref('EgressEvent') } },
              },
            },
            'application/x-ndjson': { schema: ref('EgressEvent') },
          },
        },
        '400': err('bad limit or since'),
        '404': err('no such vm'),
      },
      {
        parameters: [
          nameParam,
          q('limit', { type: 'integer', default: 100, maximum: 10000 }),
          q('since', { type: 'string' }, 'milliseconds since the epoch or an RFC 3339 time'),
          q('follow', { type: 'boolean', default: false }),
        ],
      },
    ),
  },
};
