import { open, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ENTRYPOINT_TAG, parseProcessStart, type ProcessInfo, type ProcessStart } from '../../domain/processes.js';
import { errorMessage } from '../../domain/errors.js';
import type { Logger } from '../../ports/logger.js';

/** The largest entrypoint file read: a POST /processes body is at most 1 MiB of cmd and args. */
const MAX_FILE = 2 << 20;
/** In the run directory (a tmpfs in the guest, emptied by a reboot): this boot's entrypoint was started. */
export const STARTED_MARKER = 'entrypoint-started';

/**
 * Starts an image's entrypoint (`--entrypoint FILE`: a POST /processes body the daemon put in the
 * seed) as a durable process tagged `entrypoint`, once per boot: the first agent of a boot marks
 * it in `runDir`, so an agent started again (killed, deployed anew) or a guest restored from a
 * save (whose run directory came with it) starts no second one. The file is checked as any
 * POST /processes body; what it cannot start (a user the image does not have, a command it lacks)
 * is said in the agent's log and not tried again this boot. Resolves with the process, or
 * undefined when this boot's was started already; never rejects.
 */
export async function startBootEntrypoint(
  file: string,
  runDir: string,
  start: (req: ProcessStart) => Promise<ProcessInfo>,
  log: Logger,
): Promise<ProcessInfo | undefined> {
  try {
    // `wx`: of two agents that start at once, one makes the marker and starts it.
    const marker = await open(join(runDir, STARTED_MARKER), 'wx').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'EEXIST') return undefined;
      throw err;
    });
    if (!marker) return undefined;
    await marker.close();
    if ((await stat(file)).size > MAX_FILE) throw new Error(`${file} is larger than ${MAX_FILE} bytes`);
    const req = parseProcessStart(JSON.parse(await readFile(file, 'utf8')) as unknown);
    const started = await start({ ...req, tag: ENTRYPOINT_TAG });
    log.info({ id: started.id, pid: started.pid, cmd: started.cmd }, 'entrypoint started');
    return started;
  } catch (err) {
    log.warn({ err: errorMessage(err), file }, 'entrypoint not started');
    return undefined;
  }
}
