import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
export const E2E_IMAGES = join(REPO, '.svc-test', 'images');
let built = false;

/** Builds the project's guest image once per test run, with the agent just built. */
export function ensureImage(): string {
  if (!built) {
    if (!existsSync(join(REPO, 'dist', 'agent', 'svc-agent.cjs'))) throw new Error('run npm run build:agent first');
    execFileSync('bash', [join(REPO, 'image', 'build-image.sh'), join(E2E_IMAGES, 'default'), join(REPO, 'dist', 'agent')], { stdio: ['ignore', 'ignore', 'inherit'] });
    built = true;
  }
  return E2E_IMAGES;
}

/** QEMU processes of VMs with these names that are still running. */
export function qemuProcesses(names: string[]): string[] {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-af', 'process=svc-'], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return out.split('\n').filter((l) => names.some((n) => l.includes(`process=svc-${n} `) || l.includes(`process=svc-${n},`)));
}
