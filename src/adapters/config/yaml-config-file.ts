import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type { parse } from 'yaml';
import { buildConfig, ConfigError, type Config } from '../../app/config.js';
import { DRIVER_SECTIONS } from '../hypervisor/driver-sections.js';
import { CLUSTER_SECTION } from '../cluster/cluster-section.js';

/**
 * YAML's parser, loaded when a file is read rather than when this module is: the CLI reaches this
 * module on every run, and `yaml` (72 CommonJS files) was 40 of its 280 ms to start where there is
 * no config file to read.
 */
export function parseYaml(text: string): unknown {
  return (createRequire(import.meta.url)('yaml') as { parse: typeof parse }).parse(text);
}

/** Which file to read: --config FILE, else $SVC_CONFIG, else ~/.svc/config.yaml when present. */
export function configPath(
  flag: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
  home = homedir(),
): string | undefined {
  if (flag) return flag;
  if (env.SVC_CONFIG) return env.SVC_CONFIG;
  const def = join(home, '.svc', 'config.yaml');
  return existsSync(def) ? def : undefined;
}

export function loadConfig(flag?: string, env: NodeJS.ProcessEnv = process.env): Config {
  const path = configPath(flag, env);
  let raw: unknown = {};
  if (path) {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new ConfigError(`cannot read config file ${path}: ${(err as Error).message}`);
    }
    try {
      raw = parseYaml(text);
    } catch (err) {
      throw new ConfigError(`config file ${path} is not valid YAML: ${(err as Error).message}`);
    }
  }
  return buildConfig(raw, env, homedir(), [...DRIVER_SECTIONS, CLUSTER_SECTION]);
}
