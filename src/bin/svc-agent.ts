#!/usr/bin/env node
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { startAgent } from '../agent-main.js';
import type { AgentOptions } from '../app/agent/agent-options.js';
import { VERSION } from '../version.js';

const USAGE = `usage: svc-agent [--listen HOST:PORT] [--vsock-port N] [--state-dir DIR] [--run-dir DIR] [--no-system-identity] [--tools-dir DIR]
                 [--journal-mb N] [--helpers-dir DIR] [--entrypoint FILE]

The svc guest agent. Defaults: --listen 0.0.0.0:7475, --vsock-port 7475 (0 disables; used only
when the kernel has AF_VSOCK and socat is present), --state-dir /var/lib/svc, --run-dir /run/svc.
--no-system-identity records identities (POST /identity) without touching hostname, machine id or
clock: for stand-in guests on a developer's host. --tools-dir names where sh, date, mkdir and ip are when the
guest's PATH has none (images from container images). --journal-mb is how much of each durable process's
output stream is kept (16); --helpers-dir where svc-keep and svc-watch are (default: beside the agent).
--entrypoint names a POST /processes body (the image's entrypoint) started once per boot, tagged
entrypoint: the first agent of a boot starts it (a file in --run-dir says it did). On start it prints
one JSON line {"listening": "HOST:PORT"} on stdout.`;

async function main(argv: string[]): Promise<void> {
  const opts: AgentOptions = {
    listen: '0.0.0.0:7475',
    vsockPort: 7475,
    stateDir: '/var/lib/svc',
    runDir: '/run/svc',
    version: VERSION,
    systemIdentity: true,
    journalBytes: 16 << 20,
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--listen':
        opts.listen = value();
        break;
      case '--vsock-port':
        opts.vsockPort = Number(value());
        break;
      case '--state-dir':
        opts.stateDir = value();
        break;
      case '--run-dir':
        opts.runDir = value();
        break;
      case '--no-system-identity':
        opts.systemIdentity = false;
        break;
      case '--tools-dir':
        opts.toolsDir = value();
        break;
      case '--journal-mb': {
        const mb = Number(value());
        if (!Number.isInteger(mb) || mb < 1 || mb > 4096) {
          console.error('svc-agent: --journal-mb must be an integer from 1 to 4096');
          process.exit(2);
        }
        opts.journalBytes = mb << 20;
        break;
      }
      case '--helpers-dir':
        opts.helpersDir = value();
        break;
      case '--entrypoint':
        opts.entrypoint = value();
        break;
      case '--version':
        console.log(VERSION);
        return;
      case '--help':
      case '-h':
        console.log(USAGE);
        return;
      default:
        console.error(`svc-agent: unknown argument ${argv[i]}\n${USAGE}`);
        process.exit(2);
    }
  }
  if (!Number.isInteger(opts.vsockPort) || opts.vsockPort < 0) {
    console.error('svc-agent: --vsock-port must be a non-negative integer');
    process.exit(2);
  }
  // V8 drops the bytecode of functions it has not run lately. A guest restored from a saved state
  // (a clone, a pool claim, a restore) would then parse and compile them again before its first
  // answer, and under TCG that was up to a sixth of the code the guest translates anew for it
  // (docs/suspend-and-clones.md). The flag is read at each collection, so setting it here holds
  // for every launcher (the images' scripts, agent deploy, the single executable).
  setFlagsFromString('--no-flush-bytecode');
  const agent = await startAgent(opts);
  // The guest's supervisor and agent deploy find the running agent through this file.
  try {
    mkdirSync(opts.runDir, { recursive: true });
    writeFileSync(join(opts.runDir, 'agent.pid'), `${process.pid}\n`);
  } catch {
    // a read-only run dir only costs deploy its restart
  }
  process.stdout.write(JSON.stringify({ listening: `${agent.host}:${agent.port}` }) + '\n');
  const stop = () => void agent.stop().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  console.error(`svc-agent: ${(err as Error).message}`);
  process.exit(1);
});
