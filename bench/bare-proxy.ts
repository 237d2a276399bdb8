// A bare HTTP proxy in a process of its own, for bench/cluster.ts: what one more Node process
// relaying a call costs on this host, with nothing of svc's in it (no express, no token check, no
// routing). `node bare-proxy.js PORT` relays every request to 127.0.0.1:PORT as it came (headers
// and all) on kept-alive connections, and prints the port it listens on.
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';

const target = Number(process.argv[2]);
const agent = new Agent({ keepAlive: true, maxSockets: 64, noDelay: true });

const server = createServer((req, res) => {
  const out = request(
    { host: '127.0.0.1', port: target, method: req.method, path: req.url, headers: req.headers, agent },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  out.on('error', () => res.destroy());
  req.pipe(out);
});
server.listen(0, '127.0.0.1', () => console.log((server.address() as AddressInfo).port));
// Ended by its bench: exits, so that a profile asked for (BENCH_SVCD_PROF) is written.
process.on('SIGTERM', () => process.exit(0));
