import { InvalidArgumentError } from './errors.js';

export const VM_NAME_RE = /^[a-z][a-z0-9-]{0,62}$/;
export const SECRET_NAME_RE = /^[A-Za-z][A-Za-z0-9._-]{0,62}$/;

export function assertVmName(name: unknown): string {
  if (typeof name !== 'string' || !VM_NAME_RE.test(name)) {
    throw new InvalidArgumentError(
      `invalid vm name ${JSON.stringify(name)}: use 1-63 characters a-z, 0-9 and '-', starting with a letter`,
    );
  }
  return name;
}

/** The daemon's own guests (image snapshots being made) have names with this prefix, which no VM may take. */
export const RESERVED_VM_PREFIX = 'svc-snapshot-';

/** A name for a new VM: a VM name, and not one of the daemon's own. */
export function assertNewVmName(name: unknown): string {
  const n = assertVmName(name);
  if (n.startsWith(RESERVED_VM_PREFIX))
    throw new InvalidArgumentError(
      `invalid vm name ${JSON.stringify(n)}: names beginning with ${RESERVED_VM_PREFIX} are the daemon's`,
    );
  return n;
}

export function assertSecretName(name: unknown): string {
  if (typeof name !== 'string' || !SECRET_NAME_RE.test(name)) {
    throw new InvalidArgumentError(
      `invalid secret name ${JSON.stringify(name)}: use 1-63 characters A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter`,
    );
  }
  return name;
}

/** The name an omitted VM name becomes: `vm-N`, one more than the highest N in use. */
export function nextDefaultName(existing: Iterable<string>): string {
  let max = 0;
  for (const n of existing) {
    const m = /^vm-(\d+)$/.exec(n);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return `vm-${max + 1}`;
}

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;

/** A DNS name in lower case, without its root dot: labels of letters, digits, `_` and `-`; not all digits at the end (an IP). */
export function isHostName(name: string): boolean {
  const labels = name.split('.');
  return name.length <= 253 && labels.every((l) => LABEL.test(l)) && !/^\d+$/.test(labels[labels.length - 1]);
}

/** A JSON object (not null, not an array). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
