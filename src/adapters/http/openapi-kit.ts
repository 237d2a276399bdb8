/** Helpers the OpenAPI description's parts are written with (openapi.ts and its per-area files). */
export type Schema = Record<string, unknown>;
export const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });
export const err = (description: string) => ({
  description,
  content: { 'application/json': { schema: ref('Error') } },
});
export const json = (description: string, schema: Schema) => ({
  description,
  content: { 'application/json': { schema } },
});
/** A request body of JSON in `schema`, required unless told. */
export const jsonBody = (schema: Schema, required = true) => ({
  required,
  content: { 'application/json': { schema } },
});
export const nameParam = {
  name: 'name',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^[a-z][a-z0-9-]{0,62}$' },
};
export const q = (name: string, schema: Schema, description?: string, required = false) => ({
  name,
  in: 'query',
  required,
  schema,
  ...(description ? { description } : {}),
});
export const pathQ = q('path', { type: 'string' }, 'absolute guest path', true);
export const message = json('done', ref('Message'));
export const proxyErrors = {
  '400': err('bad input'),
  '401': err('missing or invalid token'),
  '403': err('over TCP: a foreign Host or Origin'),
  '404': err('vm or guest path not found'),
  '507': err("the guest's disk is full (insufficient_storage)"),
  '502': err('the agent answered with an error or garbage'),
  '503': err('the agent cannot be reached'),
  '501': err(
    "the VM's driver has no guest to do this in (the fake hypervisor without fake_agent), or its agent is older than the request (exec's user or env): svc agent deploy",
  ),
};

export function op(summary: string, responses: Record<string, unknown>, extra: Schema = {}): Schema {
  return {
    summary,
    responses: {
      '401': err('missing or invalid token'),
      '403': err("over TCP: a Host that is not the daemon's, or a change from a foreign Origin"),
      ...responses,
    },
    ...extra,
  };
}
