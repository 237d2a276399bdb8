import type { IncomingMessage, RequestListener } from 'node:http';
import { USERDATA_MAX_BYTES } from '../../domain/agent.js';
import { InvalidArgumentError, PayloadTooLargeError } from '../../domain/errors.js';
import { writeHttpError } from '../http-kit/error-status.js';

/**
 * An identity is a name, a time, a machine id and an address (a few hundred bytes), and for a
 * create restored from a snapshot its userdata: at most USERDATA_MAX_BYTES, six times that when
 * every byte is JSON-escaped.
 */
export const IDENTITY_BODY_MAX = USERDATA_MAX_BYTES * 6 + 4096;

/**
 * `POST /identity` answered before express, every other request handed to `rest` (the agent's
 * express app, which also has the route). A guest restored from a saved state (a clone, a resumed
 * VM) answers its identity first, and under TCG every path taken for the first time since the
 * restore is translated anew: express's router, its body parser and its metrics took about 70 ms
 * of a clone's 300 ms in the guest (docs/suspend-and-clones.md). This reads a small JSON body
 * with the same rules as the app (application/json, at most IDENTITY_BODY_MAX bytes here, errors
 * as `{error, code}`) and answers 204.
 */
export function identityFirst(setIdentity: (body: unknown) => Promise<void>, rest: RequestListener): RequestListener {
  return (req, res) => {
    if (req.method !== 'POST' || req.url !== '/identity') return rest(req, res);
    readJson(req)
      .then(setIdentity)
      .then(
        () => {
          res.writeHead(204).end();
        },
        (err: unknown) => {
          if (res.headersSent) return void res.destroy();
          // A body left unread would be taken as the next request on this connection.
          writeHttpError(res, err, !req.complete);
        },
      );
  };
}

function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (!/^application\/json\s*(;|$)/i.test(req.headers['content-type'] ?? '')) {
      return reject(new InvalidArgumentError('request body must be application/json'));
    }
    const tooBig = () => new PayloadTooLargeError(`request body larger than ${IDENTITY_BODY_MAX} bytes`);
    if (Number(req.headers['content-length'] ?? 0) > IDENTITY_BODY_MAX) return reject(tooBig());
    const parts: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > IDENTITY_BODY_MAX) {
        req.off('data', onData);
        reject(tooBig());
        return;
      }
      parts.push(c);
    };
    req.on('data', onData);
    req.once('error', reject);
    req.once('end', () => {
      if (size > IDENTITY_BODY_MAX) return;
      try {
        resolve(JSON.parse(Buffer.concat(parts).toString('utf8')));
      } catch (err) {
        reject(new InvalidArgumentError(`invalid JSON body: ${(err as Error).message}`));
      }
    });
  });
}
