import type { Readable } from 'node:stream';
import { InternalError } from '../../domain/errors.js';
import type { AgentInstaller, RemoteShell, SshTarget } from '../../ports/tunnels.js';

/**
 * Installs the agent with shell commands over SSH. Paths are under `$SVC_GUEST_ROOT` when the
 * guest's SSH server sets it (the fake hypervisor's stand-in guests live in a directory); real
 * guests leave it unset, so the paths are the guest's own `/opt/svc` and `/run/svc`.
 */
export class SshAgentInstaller implements AgentInstaller {
  constructor(private readonly remote: RemoteShell) {}

  async install(target: SshTarget, agentTar: Readable): Promise<void> {
    const dir = '"${SVC_GUEST_ROOT:-}"/opt/svc';
    const script = [
      'set -e', `mkdir -p ${dir}`, `rm -rf ${dir}/agent.new ${dir}/agent.old`, `mkdir ${dir}/agent.new`, `tar -x -C ${dir}/agent.new`,
      `if [ -d ${dir}/agent ]; then mv ${dir}/agent ${dir}/agent.old; fi`, `mv ${dir}/agent.new ${dir}/agent`, `rm -rf ${dir}/agent.old`,
    ].join('; ');
    const up = await this.remote.exec(target, script, agentTar);
    if (up.code !== 0) throw new InternalError(`agent upload failed (exit ${up.code}): ${up.stderr.trim()}`);
  }

  async restart(target: SshTarget): Promise<void> {
    const pidfile = '"${SVC_GUEST_ROOT:-}"/run/svc/agent.pid';
    const out = await this.remote.exec(target, `if [ -f ${pidfile} ]; then kill "$(cat ${pidfile})" 2>/dev/null || true; fi`);
    if (out.code !== 0) throw new InternalError(`agent restart failed: ${out.stderr.trim()}`);
  }
}
