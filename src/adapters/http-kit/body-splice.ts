import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { declaredLength, stopReads, type TakenConnection } from './take-connection.js';

/**
 * A mover of body bytes outside Node (process-kit/splice.ts, given by the composition: kits
 * import no other adapter). A body that goes through Node costs the proxying node two copies of
 * every byte in JavaScript; on a machine with few cores that is a third of a copy's speed.
 */
export interface BodySplice {
  /** Bodies shorter than this go through Node (starting the mover costs about a millisecond). */
  minBytes: number;
  /**
   * Moves exactly `length` bytes from `source` to `dest`. `done` rejects with an error whose
   * `side` is `destination` when the receiver stopped taking them.
   */
  move(source: Socket, dest: Socket, length: number): { done: Promise<void>; kill(): void };
  /** Requests whose answers may be large (downloads): sent on a connection of their own so that theirs can be moved too. */
  largeAnswers?: (req: IncomingMessage) => boolean;
}

/** How long a target that stopped taking a spliced body has to answer why before the call is given up. */
const EARLY_ANSWER_MS = 2000;

/** Calls `then` once what was written to `w` has reached the kernel, or once `socket` closed (the caller checks which). */
function flushed(w: { writableLength: number }, socket: Socket, then: () => void): void {
  if (w.writableLength === 0 || socket.destroyed) return then();
  const again = () => {
    socket.off('drain', again);
    socket.off('close', again);
    setImmediate(() => flushed(w, socket, then));
  };
  socket.once('drain', again);
  socket.once('close', again);
}

/**
 * Feeds `out` (a request on its own connection `up`) a body of `length` bytes from a taken
 * connection: the head and what the server had read of the body through Node, the rest moved by
 * `sp`. A target that stops taking the body has EARLY_ANSWER_MS to answer why.
 */
export function spliceBody(
  out: ClientRequest,
  up: Socket,
  taken: TakenConnection,
  length: number,
  sp: BodySplice,
  res: ServerResponse,
): void {
  const pending = taken.pending.subarray(0, length);
  out.flushHeaders();
  if (pending.length) out.write(pending);
  // The head and those bytes reach the kernel before the mover writes the rest after them.
  const start = () => {
    if (out.destroyed || up.destroyed) return;
    moveWhileAnswered(sp, taken.connection, up, length - pending.length, res).then(
      () => {
        up.resume(); // handing a socket to a child stops Node's reads of it; the answer comes here
        out.end();
      },
      (err: unknown) => {
        if ((err as { side?: string }).side !== 'destination') return void res.destroy();
        // The target stopped taking the body: it has most likely answered why.
        let answered = false;
        out.once('response', () => (answered = true));
        up.resume();
        setTimeout(() => {
          if (!answered) out.destroy();
        }, EARLY_ANSWER_MS).unref();
      },
    );
  };
  out.once('socket', () => setImmediate(() => flushed(out, up, start)));
}

/** `sp` moving `length` bytes from `source` to `dest`, stopped if the caller's answer closes first. */
function moveWhileAnswered(sp: BodySplice, source: Socket, dest: Socket, length: number, res: ServerResponse) {
  const run = sp.move(source, dest, length);
  stopReads(source); // again: spawning the mover cleared `reading`
  const gone = () => {
    if (!res.writableFinished) run.kill();
  };
  res.on('close', gone);
  return run.done.finally(() => res.off('close', gone));
}

/**
 * An answer of a declared length of `sp.minBytes` or more, on the call's own connection `up`,
 * moved to the caller's connection by `sp` after its head and what Node had read of it; the
 * caller's connection closes after it. False, with nothing done, when it does not apply.
 */
export function spliceAnswer(
  answer: IncomingMessage,
  res: ServerResponse,
  up: Socket,
  sp: BodySplice,
  headers: Record<string, string | string[] | undefined>,
  done: () => void,
): boolean {
  const length = declaredLength(answer) ?? 0;
  const client = res.socket;
  if (answer.statusCode !== 200 || length < sp.minBytes || !client || res.headersSent) return false;
  // The call's connection closes under it once the mover is done: the answer's end is not Node's to see.
  answer.on('error', () => undefined);
  answer.pause();
  if (!stopReads(up)) {
    answer.resume();
    return false;
  }
  res.shouldKeepAlive = false;
  res.writeHead(200, { ...headers, connection: 'close' });
  res.flushHeaders();
  const end = (ok: boolean) => {
    if (ok) res.end(() => up.destroy());
    else {
      res.destroy();
      up.destroy();
    }
    done();
  };
  // The parser gives the answer the rest of the bytes it holds once this callback returns; Node
  // reads nothing more of the connection, so after that the answer has all it will have.
  setImmediate(() => {
    const first: Buffer[] = [];
    for (let c = answer.read() as Buffer | null; c !== null; c = answer.read() as Buffer | null) first.push(c);
    const had = Buffer.concat(first).subarray(0, length);
    if (had.length) res.write(had);
    flushed(res, client, () => moveRest(had.length));
  });
  const moveRest = (had: number) => {
    if (res.destroyed || client.destroyed) return end(false);
    if (had === length) return end(true);
    moveWhileAnswered(sp, up, client, length - had, res).then(
      () => end(true),
      () => end(false),
    );
  };
  return true;
}
