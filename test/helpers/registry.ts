import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { freePort } from '../../src/adapters/hypervisor/free-port.js';

/** A container registry of a test's own: Debian's docker-registry on a loopback port, plain HTTP, one login. */
export interface TestRegistry {
  /** `127.0.0.1:PORT`: what a reference names and `insecure_registries` lists. */
  host: string;
  username: string;
  password: string;
  /** Pushes a container image (skopeo's `TRANSPORT:REF`) as `host/path`. */
  push(from: string, path: string): void;
  stop(): void;
}

function answers(url: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request(url, { timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

/**
 * Starts `/usr/bin/docker-registry` (installed by scripts/ensure-host-deps.sh) with its storage in
 * `dir` and an htpasswd login (a bcrypt line made with python3's crypt, which Debian 12 has);
 * resolves once it refuses an anonymous call with 401.
 */
export async function startRegistry(dir: string): Promise<TestRegistry> {
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const username = 'svc-test';
  const password = `pw-${port}-${Date.now()}`;
  const hash = execFileSync(
    'python3',
    [
      '-W',
      'ignore',
      '-c',
      'import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))',
      password,
    ],
    { encoding: 'utf8' },
  ).trim();
  writeFileSync(join(dir, 'htpasswd'), `${username}:${hash}\n`);
  writeFileSync(
    join(dir, 'config.yml'),
    [
      'version: 0.1',
      'log:',
      '  level: error',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(dir, 'data')}`,
      'http:',
      `  addr: ${host}`,
      'auth:',
      '  htpasswd:',
      '    realm: svc-test',
      `    path: ${join(dir, 'htpasswd')}`,
      '',
    ].join('\n'),
  );
  const proc = spawn('docker-registry', ['serve', join(dir, 'config.yml')], { stdio: 'ignore' });
  const stop = () => void proc.kill('SIGKILL');
  for (let i = 0; (await answers(`http://${host}/v2/`)) !== 401; i++) {
    if (i > 100 || proc.exitCode !== null) {
      stop();
      throw new Error(`docker-registry did not start on ${host}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    host,
    username,
    password,
    push: (from, path) =>
      execFileSync('skopeo', [
        '--insecure-policy',
        'copy',
        '-q',
        '--dest-tls-verify=false',
        '--dest-creds',
        `${username}:${password}`,
        from,
        `docker://${host}/${path}`,
      ]),
    stop,
  };
}
