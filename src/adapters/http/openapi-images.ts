/** The OpenAPI description of images: built from recipes, baked from VMs, imported (docs/image.md). */
import { err, json, op, q, ref, jsonBody, type Schema } from './openapi-kit.js';

/** A private registry's login, as a pull and a resolve take it. */
function registryAuth(description: string): Schema {
  return {
    type: 'object',
    description,
    required: ['username', 'password'],
    properties: { username: { type: 'string' }, password: { type: 'string' } },
  };
}

export const IMAGE_SCHEMAS: Record<string, Schema> = {
  ImageRequest: {
    type: 'object',
    required: ['name'],
    properties: {
      name: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,62}$' },
      description: { type: 'string' },
      from: {
        type: 'string',
        description:
          "base image of a recipe, such as debian; or a host file to import: oci-archive:PATH, docker-archive:PATH, disk:PATH (inside the daemon's import_dirs); or a container image to pull from a registry: docker://REF (python:3.12 is docker.io/library/python:3.12); or a disk to download: its https:// URL (a distribution's cloud image, qcow2 or raw)",
      },
      digest: {
        type: 'string',
        pattern: '^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$',
        description:
          "imports from a URL: the disk's digest, checked after the download; needed for a plain http:// URL",
      },
      registry_auth: registryAuth(
        'pulls (docker://) from a private registry: its login, used for this pull alone and never kept',
      ),
      from_vm: { type: 'string', description: 'a stopped VM to bake' },
      ssh_user: {
        type: 'string',
        description: 'imports of a disk (disk:PATH or a URL): the user the daemon logs in as over SSH (default root)',
      },
      packages: { type: 'array', items: { type: 'string' } },
      run: { type: 'array', items: { type: 'string' } },
      files: {
        type: 'array',
        items: {
          type: 'object',
          required: ['path', 'content'],
          properties: {
            path: { type: 'string' },
            content: { type: 'string', format: 'byte' },
            mode: { type: 'string' },
          },
        },
      },
      env: { type: 'object', additionalProperties: { type: 'string' } },
    },
  },
  ImageBuildEvent: {
    type: 'object',
    required: ['phase', 'message', 'name', 't', 'elapsed_ms'],
    properties: {
      phase: {
        type: 'string',
        enum: ['accepted', 'import', 'boot', 'packages', 'files', 'env', 'run', 'bake', 'ready', 'error'],
      },
      message: { type: 'string' },
      name: { type: 'string' },
      t: { type: 'string', format: 'date-time' },
      elapsed_ms: { type: 'integer' },
      image: ref('Image'),
      error: { type: 'string' },
      code: { type: 'string' },
      percent: { type: 'integer', description: 'import progress (phase import)' },
    },
  },
  Image: {
    type: 'object',
    required: ['id', 'os', 'description', 'size_bytes', 'created_at', 'agent_ready', 'boot', 'source', 'in_use_by'],
    properties: {
      id: { type: 'string' },
      os: { type: 'string' },
      description: { type: 'string' },
      size_bytes: { type: 'integer' },
      created_at: { type: 'string', format: 'date-time' },
      agent_ready: { type: 'boolean' },
      boot: { type: 'string', enum: ['kernel', 'firmware'] },
      source: { type: 'string' },
      min_disk_gb: { type: 'integer' },
      min_memory_mb: {
        type: 'integer',
        description: 'the least memory a VM of it boots in; a create below it is a 400',
      },
      ssh_user: { type: 'string' },
      built: { type: 'boolean' },
      revision: { type: 'string', description: 'changes whenever the image is built again' },
      outdated: {
        type: 'boolean',
        description:
          'a built-in image built by an older svc (its recipe or agent changed since): its VMs run the agent of then; built again in the background at start',
      },
      older_builds: {
        type: 'integer',
        description:
          'older builds of the image kept for the VMs that stand on them (it was built anew since); removed when none does',
      },
      entrypoint: {
        allOf: [ref('ProcessStart')],
        description:
          "what a VM's agent starts at each cold boot, as a process tagged entrypoint (a container image's Entrypoint and Cmd, as its User, in its WorkingDir); a create with entrypoint false runs none",
      },
      in_use_by: { type: 'array', items: { type: 'string' } },
      snapshots: {
        type: 'array',
        description:
          'booted guests of the image, suspended, that creates of their shape restore copies of (docs/snapshot-creates.md)',
        items: {
          type: 'object',
          required: ['cpus', 'memory_mb', 'disk_gb', 'size_bytes', 'created_at', 'capture_ms'],
          properties: {
            cpus: { type: 'integer' },
            memory_mb: { type: 'integer' },
            entrypoint: {
              oneOf: [
                { type: 'boolean', enum: [false] },
                {
                  type: 'object',
                  properties: {
                    restart: { type: 'string', enum: ['always', 'on-failure'] },
                    max_restarts: { type: 'integer' },
                  },
                },
              ],
              description:
                "present for creates with entrypoint false (its guest runs no image's entrypoint) or a restart policy (its guest runs it with that policy)",
            },
            disk_gb: { type: 'integer', description: 'the disk it booted with; copies grow theirs' },
            size_bytes: { type: 'integer' },
            created_at: { type: 'string', format: 'date-time' },
            capture_ms: { type: 'integer', description: 'how long its boot and suspend took' },
          },
        },
      },
    },
  },
};

export const IMAGE_PATHS: Record<string, Record<string, Schema>> = {
  '/images': {
    get: op('List built images', { '200': json('images', { type: 'array', items: ref('Image') }) }),
    post: op(
      'Build an image from a recipe, bake a stopped VM, or import a container image archive or a cloud disk',
      {
        '201': json('the built image', ref('Image')),
        '200': {
          description: 'progress stream (stream=1 or Accept: application/x-ndjson)',
          content: { 'application/x-ndjson': { schema: ref('ImageBuildEvent') } },
        },
        '400': err(
          'invalid recipe, a step of it failed, or an import refused (outside import_dirs, not what it claims)',
        ),
        '404': err('no such vm'),
        '409': err('the image exists'),
        '500': err('the build failed'),
      },
      {
        parameters: [q('stream', { type: 'string', enum: ['1'] })],
        requestBody: jsonBody(ref('ImageRequest')),
      },
    ),
  },
  '/images/resolve': {
    post: op(
      "What a pull of a registry's image would take now: the digest of its linux/amd64 manifest (a tag that moved has a new one)",
      {
        '200': json('the reference made whole, and its digest', {
          type: 'object',
          required: ['from', 'digest'],
          properties: {
            from: { type: 'string', description: 'docker://REGISTRY/PATH:TAG' },
            digest: { type: 'string', pattern: '^sha256:[a-f0-9]{64}$' },
          },
        }),
        '400': err('not docker://REF, or what the registry refused or a registry that did not answer'),
      },
      {
        requestBody: jsonBody({
          type: 'object',
          additionalProperties: false,
          required: ['from'],
          properties: {
            from: { type: 'string', description: 'docker://REF (python:3.12 is docker.io/library/python:3.12)' },
            registry_auth: registryAuth("a private registry's login, used for this look alone and never kept"),
          },
        }),
      },
    ),
  },
  '/images/{id}': {
    get: op(
      'Get a built image',
      { '200': json('the image', ref('Image')), '400': err('bad image name'), '404': err('not built') },
      { parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }] },
    ),
    delete: op(
      'Delete a built image nothing uses',
      {
        '200': json('deleted', {
          type: 'object',
          properties: { message: { type: 'string' }, id: { type: 'string' } },
        }),
        '404': err('not built'),
        '409': err('in use by a vm, a template or the warm pool'),
      },
      { parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }] },
    ),
  },
};
