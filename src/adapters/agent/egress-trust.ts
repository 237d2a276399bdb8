import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { GuestEgress } from '../../domain/agent.js';

/** Debian's bundle (what OpenSSL, curl, Python and Node read); a guest without one gets one. */
const BUNDLE = 'etc/ssl/certs/ca-certificates.crt';
/** Where update-ca-certificates finds it again when it rebuilds the bundle (a package's update). */
const LOCAL = 'usr/local/share/ca-certificates/svc-egress.crt';
const BEGIN = '# svc egress CA: begin';
const END = '# svc egress CA: end';
const STATE = 'egress.json';

/** The variables this process set for its children last time (taken away when they change). */
let setVars: string[] = [];

/**
 * A VM's egress secrets in its guest (docs/egress-secrets.md): the VM's CA trusted by the
 * system (when `trustStore`: a real guest, not a stand-in on a developer's host), and the
 * placeholders (and the CA variables) in the environment of every process the agent starts from
 * now on. Kept in `<stateDir>/egress.json`, so a restarted agent sets them again (`resumeEgress`).
 */
export function applyEgress(e: GuestEgress, o: { stateDir: string; root?: string; trustStore: boolean }): void {
  mkdirSync(o.stateDir, { recursive: true, mode: 0o700 });
  writeAtomic(join(o.stateDir, STATE), JSON.stringify(e), 0o600);
  setUp(e, o);
}

/** The egress a previous agent was given, set again (agent start). */
export function resumeEgress(o: { stateDir: string; root?: string; trustStore: boolean }): void {
  let e: GuestEgress;
  try {
    e = JSON.parse(readFileSync(join(o.stateDir, STATE), 'utf8')) as GuestEgress;
  } catch {
    return;
  }
  setUp(e, o);
}

function setUp(e: GuestEgress, o: { root?: string; trustStore: boolean }): void {
  const caVars = o.trustStore ? trust(o.root ?? '/', e.ca_pem) : {};
  for (const k of setVars) delete process.env[k];
  const vars = { ...caVars, ...e.env };
  Object.assign(process.env, vars);
  setVars = Object.keys(vars);
}

/**
 * Puts the CA in the system's trust store (none: takes it out): a block of its own at the end of
 * the bundle, and a copy where update-ca-certificates looks. Answers the variables that point
 * programs with a store of their own (Python's requests, Node) at it.
 */
function trust(root: string, caPem: string | undefined): Record<string, string> {
  const bundle = join(root, BUNDLE);
  const local = join(root, LOCAL);
  let text = '';
  try {
    text = readFileSync(bundle, 'utf8');
  } catch {
    // none yet (a small image): made below
  }
  const start = text.indexOf(BEGIN);
  const end = text.indexOf(END, start);
  if (start >= 0 && end >= 0) text = text.slice(0, start) + text.slice(end + END.length + 1);
  if (!caPem) {
    rmSync(local, { force: true });
    if (start >= 0) writeAtomic(bundle, text, 0o644);
    return {};
  }
  mkdirSync(dirname(local), { recursive: true });
  writeAtomic(local, caPem, 0o644);
  mkdirSync(dirname(bundle), { recursive: true });
  if (text && !text.endsWith('\n')) text += '\n';
  writeAtomic(bundle, `${text}${BEGIN}\n${caPem.trim()}\n${END}\n`, 0o644);
  const b = `/${BUNDLE}`;
  return { SSL_CERT_FILE: b, REQUESTS_CA_BUNDLE: b, CURL_CA_BUNDLE: b, NODE_EXTRA_CA_CERTS: `/${LOCAL}` };
}

function writeAtomic(path: string, text: string, mode: number): void {
  const tmp = `${path}.svc-tmp`;
  writeFileSync(tmp, text, { mode });
  renameSync(tmp, path);
}
