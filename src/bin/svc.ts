#!/usr/bin/env node
console.log(`usage: svc <command> [args]

The svc command line is not built yet (issue 6). Until then, talk to the daemon's HTTP API:
  curl --unix-socket ~/.svc/svc.sock http://svc/vms`);
