/**
 * The daemon's OpenAPI 3 description, built as data so a test can compare its paths with the
 * routes express serves. Operations with `x-svc-planned: true` are described but not served yet.
 */
import { err, json, message, nameParam, op, proxyErrors, ref, jsonBody, type Schema } from './openapi-kit.js';
import { PROCESS_PATHS, PROCESS_SCHEMAS } from './openapi-processes.js';
import { CLUSTER_PATHS, CLUSTER_SCHEMAS } from './openapi-cluster.js';
import { EGRESS_PATHS, EGRESS_SCHEMAS } from './openapi-egress.js';
import { GUEST_PATHS, GUEST_SCHEMAS } from './openapi-guest.js';
import { IMAGE_PATHS, IMAGE_SCHEMAS } from './openapi-images.js';
import { SYSTEM_PATHS, SYSTEM_SCHEMAS } from './openapi-system.js';
import { VM_SCHEMAS } from './openapi-vm-schemas.js';
import { VM_PATHS } from './openapi-vms.js';
import { SNAPSHOT_PATHS, SNAPSHOT_SCHEMAS } from './openapi-snapshots.js';

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

export function openApiDocument(version: string): Record<string, unknown> {
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
        ...VM_SCHEMAS,
        ...SNAPSHOT_SCHEMAS,
      },
    },
    paths: markPlanned({
      ...PROCESS_PATHS,
      ...CLUSTER_PATHS,
      ...GUEST_PATHS,
      ...EGRESS_PATHS,
      ...SYSTEM_PATHS,
      ...IMAGE_PATHS,
      ...VM_PATHS,
      ...SNAPSHOT_PATHS,
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
    }),
  };
}
