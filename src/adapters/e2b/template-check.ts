import { LIMITS } from '../../domain/create-request.js';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import { ENV_NAME } from './sandboxes.js';
import type { BuildSpec, TemplateStep } from './template-run.js';

/** The SDK's hash of a COPY's files: what names an upload. */
export const FILES_HASH = /^[a-f0-9]{64}$/;
const MAX_STEPS = 1000;
/** A sandbox keeps its envs in its VM's tags (64 at most, a few are E2B's own). */
const MAX_ENVS = 40;
const STEP_TYPES = ['RUN', 'COPY', 'ENV', 'WORKDIR', 'USER'];

/**
 * A build as the SDK sends it, checked whole before anything is made (a 400 or 501 naming the
 * step): its fields, each step's kind and arguments, and the environment it leaves. Its steps.
 */
export function checkBuild(spec: BuildSpec): TemplateStep[] {
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec))
    throw new InvalidArgumentError('a build is a JSON object');
  for (const k of ['fromImage', 'fromTemplate', 'startCmd', 'readyCmd'] as const)
    if (spec[k] !== undefined && spec[k] !== null && typeof spec[k] !== 'string')
      throw new InvalidArgumentError(`${k} must be a string`);
  if (spec.steps !== undefined && (!Array.isArray(spec.steps) || spec.steps.length > MAX_STEPS))
    throw new InvalidArgumentError(`steps must be a list of at most ${MAX_STEPS}`);
  const steps = spec.steps ?? [];
  const envs = new Set<string>();
  for (const [i, s] of steps.entries()) {
    const where = `step ${i + 1}`;
    if (typeof s !== 'object' || s === null) throw new InvalidArgumentError(`${where} must be an object`);
    const args = s.args ?? [];
    if (!Array.isArray(args) || !args.every((a) => typeof a === 'string'))
      throw new InvalidArgumentError(`${where}: args must be a list of strings`);
    if (!STEP_TYPES.includes(s.type)) throw new NotSupportedError(`${where}: svc does not build ${s.type} steps`);
    if ((s.type === 'RUN' || s.type === 'WORKDIR' || s.type === 'USER') && !args[0])
      throw new InvalidArgumentError(`${where}: ${s.type} needs its argument`);
    if (s.type === 'ENV')
      for (let j = 0; j < args.length; j += 2) {
        // they become the sandboxes' envs, kept in their VMs' tags (sandboxes.ts)
        if (!ENV_NAME.test(args[j]) || (args[j + 1] ?? '').length > LIMITS.tagValue)
          throw new InvalidArgumentError(
            `${where}: ENV ${JSON.stringify(args[j].slice(0, 60))}: svc takes names of letters, digits and _ (1 to 55) and values of at most ${LIMITS.tagValue} characters`,
          );
        envs.add(args[j]);
      }
    if (s.type === 'COPY') {
      if (!(args[0] && args[1])) throw new InvalidArgumentError(`${where}: COPY needs its source and destination`);
      if (!(s.filesHash && FILES_HASH.test(s.filesHash)))
        throw new InvalidArgumentError(`${where}: COPY needs the hash of its uploaded files`);
      if (args[3] && !/^[0-7]{3,4}$/.test(args[3]))
        throw new InvalidArgumentError(`${where}: COPY mode ${args[3]} is not octal`);
    }
  }
  if (envs.size > MAX_ENVS)
    throw new InvalidArgumentError(
      `a template sets at most ${MAX_ENVS} environment variables (they are kept in its sandboxes' tags), got ${envs.size}`,
    );
  return steps;
}
