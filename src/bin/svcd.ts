#!/usr/bin/env node
import { ConfigError } from '../app/config.js';
import { loadConfig } from '../adapters/config/yaml-config-file.js';
import { ListenError } from '../adapters/http/listeners.js';
import { startBanner } from '../adapters/http/start-banner.js';
import { startDaemon } from '../main.js';
import { VERSION } from '../version.js';

const USAGE = `usage: svcd [--config FILE]

Starts the svc daemon. Config: --config FILE, else $SVC_CONFIG, else ~/.svc/config.yaml.
Every key can be overridden by SVC_<KEY> in the environment (for example SVC_DATA_DIR).`;

async function main(argv: string[]): Promise<void> {
  let configFile: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--config' || a === '-c') configFile = argv[++i];
    else if (a.startsWith('--config=')) configFile = a.slice('--config='.length);
    else if (a === '--version') return void console.log(VERSION);
    else if (a === '--help' || a === '-h') return void console.log(USAGE);
    else {
      console.error(`svcd: unknown argument ${a}\n${USAGE}`);
      process.exit(2);
    }
  }
  if (argv.includes('--config') && !configFile) {
    console.error('svcd: --config needs a file');
    process.exit(2);
  }
  const config = loadConfig(configFile);
  const daemon = await startDaemon(config);
  // A person at a terminal gets the short version; a service manager gets the log lines only.
  if (process.stderr.isTTY) process.stderr.write(startBanner({ config, tcpPort: daemon.tcpPort, version: VERSION }));
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.error(JSON.stringify({ level: 30, msg: `received ${signal}, stopping` }));
    daemon.stop().then(
      () => process.exit(0),
      (err) => {
        console.error(`svcd: stop failed: ${(err as Error).message}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof ConfigError || err instanceof ListenError) {
    console.error(`svcd: ${err.message}`);
    process.exit(2);
  }
  console.error(`svcd: ${(err as Error).stack ?? String(err)}`);
  process.exit(1);
});
