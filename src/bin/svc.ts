#!/usr/bin/env node
import { runCli } from '../adapters/cli/cli.js';

// A reader that goes away (svc logs web | head) ends svc as it ends any program in a pipe: at once,
// without a word, with SIGPIPE's status (128 + 13); the daemon then stops what the command had begun.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(141);
  throw err;
});

// A command is over when its action is: svc ends then, once what it wrote has gone out, and is not
// held by a stdin that stays open (sleep 60 | svc x web -- true: the command ended long before its
// input did) or by a socket kept alive to the daemon.
runCli(process.argv).then((code) => {
  process.exitCode = code;
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
});
