import type { Readable } from 'node:stream';
import { createGzip } from 'node:zlib';
import { InternalError } from '../../domain/errors.js';
import { shellWord } from '../process-kit/shell-word.js';
import { INSTALL_TIMEOUT_MS, type AgentInstaller, type RemoteShell, type SshTarget } from '../../ports/tunnels.js';

const ROOT = '"${SVC_GUEST_ROOT:-}"';
const DIR = `${ROOT}/opt/svc`;

/** Starts whichever agent was installed: the single executable, else the script with the guest's node. */
const LAUNCHER = `#!/bin/sh
# svc agent launcher (written by agent deploy)
here=$(dirname "$0")
[ -x "$here/svc-agent" ] && exec "$here/svc-agent" "$@"
exec node "$here/svc-agent.cjs" "$@"
`;

/** The service a systemd guest starts the agent with, at boot and on deploy. */
const UNIT = `[Unit]
Description=svc guest agent
After=network.target

[Service]
Environment=HOME=/root SHELL=/bin/sh PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=/opt/svc/agent/run --listen 0.0.0.0:7475 --vsock-port 7475 --state-dir /var/lib/svc --run-dir /run/svc
Restart=always
RestartSec=200ms
StandardOutput=null

[Install]
WantedBy=multi-user.target
`;

/**
 * Installs the agent with shell commands over SSH: as root, or through `sudo -n` for another user
 * (cloud images log in as their default user). Paths are under `$SVC_GUEST_ROOT` when the guest's
 * SSH server sets it (the fake hypervisor's stand-in guests live in a directory; they get no
 * service); real guests leave it unset, so the paths are the guest's own `/opt/svc` and `/run/svc`.
 */
export class SshAgentInstaller implements AgentInstaller {
  constructor(private readonly remote: RemoteShell) {}

  /** The script run as root: as it is for root (and stand-in guests), through sudo otherwise. */
  private asRoot(script: string): string {
    return `if [ "$(id -u)" -eq 0 ] || [ -n "\${SVC_GUEST_ROOT:-}" ]; then sh -c ${shellWord(script)}; else sudo -n sh -c ${shellWord(script)}; fi`;
  }

  async probe(target: SshTarget, signal?: AbortSignal): Promise<{ node: boolean }> {
    const out = await this.remote.exec(
      target,
      `node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' >/dev/null 2>&1 && echo node=1 || echo node=0`,
      { signal },
    );
    return { node: /node=1/.test(out.stdout) };
  }

  async install(target: SshTarget, agentTar: Readable, signal?: AbortSignal): Promise<void> {
    const script = [
      'set -e',
      `mkdir -p ${DIR}`,
      `rm -rf ${DIR}/agent.new ${DIR}/agent.old`,
      `mkdir ${DIR}/agent.new`,
      `tar -xz -C ${DIR}/agent.new`,
      `printf %s ${shellWord(LAUNCHER)} > ${DIR}/agent.new/run`,
      `chmod 0755 ${DIR}/agent.new/run`,
      `if [ -d ${DIR}/agent ]; then mv ${DIR}/agent ${DIR}/agent.old; fi`,
      `mv ${DIR}/agent.new ${DIR}/agent`,
      `rm -rf ${DIR}/agent.old`,
      // A systemd guest of its own (not a stand-in) gets the service, enabled for the next boot
      // (the project's debian image has its own, which is kept). `enable` reloads systemd itself: a
      // daemon-reload before it was a second reload (2.6 s of a TCG guest's vCPU).
      `if [ -z "\${SVC_GUEST_ROOT:-}" ] && [ -d /run/systemd/system ] && [ ! -f /etc/systemd/system/svc-agent.service ]; then printf %s ${shellWord(UNIT)} > /etc/systemd/system/svc-agent.service; systemctl enable -q svc-agent.service; fi`,
    ].join('; ');
    const gz = createGzip({ level: 1 });
    agentTar.on('error', (err) => gz.destroy(err));
    const up = await this.remote.exec(target, this.asRoot(script), {
      stdin: agentTar.pipe(gz),
      timeoutMs: INSTALL_TIMEOUT_MS,
      signal,
    });
    if (up.code !== 0)
      throw new InternalError(`agent upload failed (exit ${up.code}): ${up.stderr.trim().slice(-500)}`);
  }

  async restart(target: SshTarget, signal?: AbortSignal): Promise<void> {
    const pidfile = `${ROOT}/run/svc/agent.pid`;
    const script =
      `if [ -z "\${SVC_GUEST_ROOT:-}" ] && [ -f /etc/systemd/system/svc-agent.service ] && [ -d /run/systemd/system ]; then systemctl restart svc-agent.service; ` +
      `elif [ -f ${pidfile} ]; then kill "$(cat ${pidfile})" 2>/dev/null || true; fi`;
    const out = await this.remote.exec(target, this.asRoot(script), { signal });
    if (out.code !== 0) throw new InternalError(`agent restart failed: ${out.stderr.trim().slice(-500)}`);
  }
}
