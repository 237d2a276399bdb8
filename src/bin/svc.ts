#!/usr/bin/env node
import { runCli } from '../adapters/cli/cli.js';

runCli(process.argv).then((code) => {
  process.exitCode = code;
});
