import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { Duplex } from 'node:stream';
import type { AgentEndpoint } from '../../ports/guest-agent.js';
import { childEnv } from '../process-kit/child-env.js';

/** Opens a byte stream to an agent endpoint; http requests ride on it. */
export type Connector = (ep: AgentEndpoint) => Duplex;

/** TCP to the host forward of the agent port (user-mode networking). */
export const tcpConnector: Connector = (ep) => connect({ host: ep.host, port: ep.port, noDelay: true });

/**
 * vsock to `cid:port` through `socat - VSOCK-CONNECT:cid:port` (Node's net has no AF_VSOCK;
 * see docs/agent.md). The process lives as long as the stream.
 */
export function socatVsockConnector(socat = 'socat'): Connector {
  return (ep) => {
    const child = spawn(socat, ['-', `VSOCK-CONNECT:${ep.cid}:${ep.port}`], { stdio: ['pipe', 'pipe', 'ignore'], env: childEnv() });
    const d = Duplex.from({ readable: child.stdout, writable: child.stdin });
    child.once('error', (err) => d.destroy(err));
    child.once('exit', (code) => {
      if (code) d.destroy(Object.assign(new Error(`socat exited with ${code}`), { code: 'ECONNREFUSED' }));
    });
    d.once('close', () => child.kill());
    return d;
  };
}

/** vsock when the endpoint has a CID and the transport allows it, else TCP. */
export function pickConnector(transport: 'auto' | 'tcp' | 'vsock', vsock: Connector = socatVsockConnector()): Connector {
  return (ep) => {
    if (transport !== 'tcp' && ep.cid) return vsock({ ...ep, port: 7475 });
    return tcpConnector(ep);
  };
}
