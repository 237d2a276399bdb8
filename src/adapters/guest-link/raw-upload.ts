import type { Socket } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { AgentFailureError, InvalidArgumentError } from '../../domain/errors.js';
import { TAKE_RAW, type AgentEndpoint, type RawTakeable } from '../../ports/guest-agent.js';
import { socketFd, splice, SpliceError, SPLICE_MIN_BYTES } from '../process-kit/splice.js';
import { fromStatus, unavailable, where } from './agent-replies.js';
import type { Connector } from './transport.js';
import { agentHost, readError, readHead, writeOut, type Head } from './raw-download.js';
import { orAfter } from '../process-kit/or-after.js';

/** How long an agent that stopped taking an upload has to say why before the daemon gives up on its answer. */
const EARLY_ANSWER_MS = 2000;

/**
 * A large upload (PUT /cp with a declared length) moved from the client's connection to a new
 * connection to the agent inside the kernel: the daemon writes the request's head and what it had
 * read of the body, the splice helper moves the rest, then the daemon reads the agent's answer.
 * `false` when it does not apply (small, no helper, a body or a transport without a socket):
 * nothing was taken, and the caller sends the body through Node as before.
 */
export async function rawUpload(
  connector: Connector,
  ep: AgentEndpoint,
  o: { path: string; contentType: string; size: number; connectTimeoutMs: number; helper: string | null },
  body: Readable,
): Promise<boolean> {
  const helper = o.helper;
  const offer = (body as Partial<RawTakeable>)[TAKE_RAW];
  if (!helper || o.size < SPLICE_MIN_BYTES || typeof offer !== 'function') return false;
  const socket = connector(ep);
  await connected(socket, ep, o.connectTimeoutMs);
  const taken = socketFd(socket) === undefined ? undefined : offer.call(body);
  if (!taken) {
    socket.destroy();
    return false;
  }
  const pending = taken.pending.subarray(0, o.size);
  const answer = readHead(socket, ep);
  answer.catch(() => undefined); // read below, or dropped with the socket
  try {
    const head = `PUT ${o.path} HTTP/1.1\r\nHost: ${agentHost(ep)}\r\nContent-Type: ${o.contentType}\r\nContent-Length: ${o.size}\r\nConnection: close\r\n\r\n`;
    await writeOut(socket, Buffer.concat([Buffer.from(head, 'latin1'), pending]));
    const left = o.size - pending.length;
    if (left > 0) {
      try {
        // Copied, not spliced: the agent takes compact segments in for less CPU than the client's
        // page fragments, and the agent is what limits an upload (docs/benchmarks.md).
        await splice(helper, taken.connection as Socket, socket as Socket, left, { mode: 'copy' }).done;
      } catch (err) {
        socket.resume();
        if (!(err instanceof SpliceError) || err.side !== 'destination')
          throw new InvalidArgumentError(`the upload broke off before its declared length: ${(err as Error).message}`);
        // The agent stopped taking the body: it has most likely said why.
        const early = await orAfter(answer, EARLY_ANSWER_MS, undefined).catch(() => undefined);
        if (early && early.status >= 300) throw fromStatus(early.status, await readError(socket, early));
        throw new AgentFailureError(`guest agent at ${where(ep)} stopped taking the upload: ${err.message}`);
      }
    }
    socket.resume(); // handing a socket to a child stops Node's reads of it; the answer comes here
    const h: Head = await answer;
    if (h.status >= 300) throw fromStatus(h.status, await readError(socket, h));
  } finally {
    socket.destroy();
  }
  return true;
}

function connected(socket: Duplex, ep: AgentEndpoint, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!(socket as { connecting?: boolean }).connecting) return resolve();
    const timer = setTimeout(() => fail(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })), ms);
    const fail = (err: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(unavailable(ep, err));
    };
    socket.once('error', fail);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', fail);
      resolve();
    });
  });
}
