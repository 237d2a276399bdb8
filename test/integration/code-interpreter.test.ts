import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../src/adapters/hypervisor/free-port.js';
import { tempDir } from '../helpers/daemon.js';
import { serverFiles } from '../../src/adapters/code-interpreter/guest-server.js';
import { poll, waitUntil } from '../helpers/wait.js';

// Debian's, as in a debian guest: its matplotlib is python3-matplotlib, a package of the tests'
// (scripts/ensure-host-deps.sh --tests), where another python3 on the PATH would not see it
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

interface Event {
  type: string;
  text?: string;
  name?: string;
  value?: string;
  traceback?: string;
  is_main_result?: boolean;
  execution_count?: number;
  html?: string;
  png?: string;
  chart?: Chart;
  data?: Record<string, unknown[]>;
}

interface Chart {
  type: string;
  title: string;
  x_label?: string;
  y_label?: string;
  x_scale?: string;
  x_ticks?: (number | string)[];
  x_tick_labels?: string[];
  elements: Record<string, unknown>[];
}

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * svc's code interpreter server (src/adapters/code-interpreter/code-interpreter.py), the one a sandbox of E2B's
 * `code-interpreter-v1` template runs, as a real python3 process on this host: the cells here only
 * print, compute and sleep, in the test's own folder. The SDK through the daemon and a guest is
 * test/e2e/qemu-debian.test.ts's.
 */
describe('E2B code interpreter server (python3 on this host)', function () {
  this.timeout(60_000);
  let server: ChildProcess;
  let base: string;
  let dir: string;
  let envsFile: string;
  let warmFile: string;
  /** The server, in a folder with its files as a guest has them (svc's own, `serverFiles`). */
  let serverPy: string;

  /** A server in `dir` with `args`; resolves with its base URL once it answers. */
  const serve = async (args: string[]): Promise<[ChildProcess, string]> => {
    const port = await freePort();
    const child = spawn(PYTHON, [serverPy, '--port', String(port), ...args], { cwd: dir, stdio: 'ignore' });
    const url = `http://127.0.0.1:${port}`;
    await poll(
      () =>
        fetch(`${url}/health`).then(
          (r) => r.ok,
          () => false,
        ),
      { ms: 15_000, every: 100 },
    );
    return [child, url];
  };

  before(async () => {
    dir = tempDir('svc-code-interpreter-');
    envsFile = join(dir, 'envs.json');
    warmFile = join(dir, 'warm');
    const kit = tempDir('svc-code-interpreter-kit-');
    for (const f of await serverFiles()) writeFileSync(join(kit, f.name), f.data);
    serverPy = join(kit, 'code-interpreter.py');
    [server, base] = await serve(['--envs', envsFile, '--warm', warmFile]);
  });
  after(() => void server?.kill());

  const execute = async (body: Record<string, unknown>, signal?: AbortSignal, at = base): Promise<Event[]> => {
    const r = await fetch(`${at}/execute`, { method: 'POST', body: JSON.stringify(body), signal });
    expect(r.status).to.equal(200);
    const events = (await r.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Event);
    expect(events.at(-1)).to.deep.equal({ type: 'end_of_execution' });
    return events;
  };
  const post = (path: string, body: unknown = {}) =>
    fetch(`${base}${path}`, { method: 'POST', body: JSON.stringify(body) });
  /** What an execution printed on one stream, whole. */
  const printed = (events: Event[], type = 'stdout') =>
    events
      .filter((e) => e.type === type)
      .map((e) => e.text)
      .join('');

  it('runs Python cells that keep their state, stream what they print in order, and give the last value', async () => {
    // the default kernel ran its empty warm-up cell, which is not counted as an execution
    await waitUntil('the warm-up cell ran', () => existsSync(warmFile), { ms: 15_000 });
    const first = await execute({ code: 'import os\nx = 41\nprint("one")\nos.system("echo two")\nx + 1' });
    expect(first.slice(0, 3)).to.deep.equal([
      { type: 'stdout', text: 'one\n' },
      { type: 'stdout', text: 'two\n' },
      { type: 'result', is_main_result: true, text: '42' },
    ]);
    expect(first.find((e) => e.type === 'number_of_executions')?.execution_count).to.equal(1);
    expect((await execute({ code: 'x * 2' }))[0]).to.include({ type: 'result', text: '82' });
    // a value's _repr_html_ is a format of the result; display() gives results that are not the main one
    const rich = await execute({
      code: 'class T:\n  def _repr_html_(self): return "<b>t</b>"\ndisplay(1)\nT()',
    });
    expect(rich.filter((e) => e.type === 'result').map((e) => [e.is_main_result, e.html])).to.deep.equal([
      [false, undefined],
      [true, '<b>t</b>'],
    ]);
    // what a cell reads from its input is an end of file, not the kernel's next request
    const read = await execute({
      code: 'import subprocess\ntry:\n  input()\nexcept EOFError:\n  print("eof")\nsubprocess.run(["cat"]).returncode',
    });
    expect(read.map((e) => e.text).slice(0, 2)).to.deep.equal(['eof\n', '0']);
    // a statement gives no result, a None neither
    expect((await execute({ code: 'y = 1\nNone' })).map((e) => e.type)).to.not.include('result');
  });

  it('gives what a cell prints and what the processes it starts print in the order they printed it', async () => {
    // each stream one pipe: the kernel's own prints do not overtake a process's printed before them
    const both = await execute({
      code: 'import os, sys\nfor i in range(60):\n  print(f"p{i}")\n  os.system(f"echo s{i}")\n  print(f"e{i}", file=sys.stderr)\n  os.system(f"echo t{i} >&2")',
    });
    const want = (a: string, b: string) => Array.from({ length: 60 }, (_, i) => `${a}${i}\n${b}${i}\n`).join('');
    expect(printed(both, 'stdout')).to.equal(want('p', 's'));
    expect(printed(both, 'stderr')).to.equal(want('e', 't'));
    // an event a line (each line was one write)
    expect(both.filter((e) => e.type === 'stdout').every((e) => /^[ps]\d+\n$/.test(e.text!))).to.equal(true);
    // results and prints back to back: each in its place, and the server's read of the stdout
    // pipe after an event's took what made it ready must not wait for more (it did, with the
    // context's lock held: every later cell of the context hung)
    const order = (events: Event[]) =>
      events.flatMap((e) => (e.type === 'stdout' ? [e.text!.trim()] : e.type === 'result' ? [`r${e.text}`] : []));
    for (let round = 0; round < 3; round++) {
      const mixed = await execute({ code: 'for i in range(3000):\n  display(i)\n  print(i)' });
      expect(order(mixed)).to.deep.equal(Array.from({ length: 3000 }, (_, i) => [`r${i}`, `${i}`]).flat());
    }
    const three = await execute({
      code: 'import os\nfor i in range(200):\n  print(f"a{i}")\n  display(i)\n  os.system(f"echo b{i}")',
    });
    expect(order(three)).to.deep.equal(Array.from({ length: 200 }, (_, i) => [`a${i}`, `r${i}`, `b${i}`]).flat());
    // output that looks like the kernel's marks (NUL, RS, "svc-mark-") is output
    const like = 'x\0\x1esvc-mark-0123:1\0y\0\x1esvc-mark-';
    const same = await execute({ code: `import sys\nsys.stdout.write(${JSON.stringify(like)})` });
    expect(printed(same, 'stdout')).to.equal(like);
  });

  it("runs a top-level await and IPython's escapes (!command, %cd, %env, %%bash, %%writefile); Python is never rewritten", async () => {
    // a context of its own, in a folder of the test's: %cd changes its kernel's folder
    const ctx = (await (await post('/contexts', { cwd: dir })).json()) as { id: string };
    const run = (code: string) => execute({ code, context_id: ctx.id });
    const said = (events: Event[]) =>
      events.flatMap((e) =>
        e.type === 'stdout' || e.type === 'stderr' || e.type === 'result'
          ? [`${e.type} ${e.text}`]
          : e.type === 'error'
            ? [`error ${e.name}: ${e.value}`]
            : [],
      );
    expect(
      said(await run('import asyncio\nasync def f():\n  await asyncio.sleep(0.05)\n  return 41\n(await f()) + 1')),
    ).to.deep.equal(['result 42']);
    expect(said(await run('!echo one; echo two >&2\nnames = !printf "a\\\\nb\\\\n"\nnames'))).to.deep.equal([
      'stdout one\n',
      'stderr two\n',
      "result ['a', 'b']",
    ]);
    expect(said(await run('for i in range(2):\n    !exit 3\n_exit_code'))).to.deep.equal(['result 3']);
    expect(said(await run('%load_ext autoreload'))[0]).to.match(
      /^error UsageError: Line magic function `%load_ext` not found/,
    );
    // IPython's aliases of shell commands
    expect(said(await run('%mkdir sub\n%ls -d sub'))).to.deep.equal(['stdout sub/\n']);
    expect(said(await run('%cd sub\n%pwd'))).to.deep.equal([`stdout ${dir}/sub\n`, `result '${dir}/sub'`]);
    expect(said(await run('%env SVC_MAGIC=on\nimport os\nos.environ["SVC_MAGIC"]'))).to.deep.equal([
      'stdout env: SVC_MAGIC=on\n',
      "result 'on'",
    ]);
    expect(said(await run('%%writefile notes.txt\nline one\nline two'))).to.deep.equal([`stdout Writing notes.txt\n`]);
    expect(readFileSync(join(dir, 'sub', 'notes.txt'), 'utf8')).to.equal('line one\nline two\n');
    expect(said(await run('%%bash\necho "$SVC_MAGIC" from bash\nexit 4'))).to.deep.equal([
      'stdout on from bash\n',
      "error CalledProcessError: Command 'bash' returned non-zero exit status 4.",
    ]);
    // a cell that is Python runs as written: a line of a string, or a continued expression
    expect(said(await run('s = """\n!not run\n"""\nt = (1\n  != 2)\n(s, t)'))).to.deep.equal([
      "result ('\\n!not run\\n', True)",
    ]);
    // and one with a syntax error beside an escape says its own error
    expect(said(await run('!true\nx = 1 +'))[0]).to.match(/^error SyntaxError: invalid syntax \(<cell>, line 2\)/);
  });

  it('expands {expr} and $name in escapes as IPython does, and runs a command it cannot expand as written', async () => {
    const ctx = (await (await post('/contexts', { cwd: dir })).json()) as { id: string };
    const run = async (code: string) => {
      const events = await execute({ code, context_id: ctx.id });
      expect(
        events.filter((e) => e.type === 'error'),
        JSON.stringify(events),
      ).to.deep.equal([]);
      return events;
    };
    await run('x = "hi"\nn = 3');
    expect(printed(await run('!echo {x} $x {x.upper()} {n*2:03d} {{x}}'))).to.equal('hi hi HI 006 {x}\n');
    // `$$` is the shell's dollar; a `$name` in single quotes is the shell's
    expect(printed(await run("%env SVC_D=from-shell\n!echo $$SVC_D '$x'"))).to.equal(
      'env: SVC_D=from-shell\nfrom-shell $x\n',
    );
    // a name it does not have, or a brace that is no expression: the command as written, for the shell
    expect(printed(await run('!for j in 1 2; do printf "$j"; done; echo {1..2}'))).to.equal('121 2\n');
    // in a function, its own variables; and in a line magic
    const inF = await run('def f(v):\n    out = !echo got $v\n    return out\nf("arg")');
    expect(inF.find((e) => e.type === 'result')?.text).to.equal("['got arg']");
    const made = await run(
      'sub = "expanded-dir"\n%mkdir {sub}\nimport os\nos.path.isdir(os.path.join(os.getcwd(), sub))',
    );
    expect(made.find((e) => e.type === 'result')?.text).to.equal('True');
    expect(existsSync(join(dir, 'expanded-dir'))).to.equal(true);
  });

  it('times code with %time, %timeit, %%time and %%timeit, saying it as IPython does', async () => {
    const ctx = (await (await post('/contexts', { cwd: dir })).json()) as { id: string };
    const run = (code: string) => execute({ code, context_id: ctx.id });
    const result = (events: Event[]) => events.find((e) => e.type === 'result')?.text;
    const cpu =
      /^CPU times: user [\d.]+ [mµn]?s, sys: [\d.]+ [mµn]?s, total: [\d.]+ [mµn]?s\nWall time: [\d.]+ [mµn]?s\n$/;
    const once = await run('%time y = sum(range(1000))\ny');
    expect([printed(once), result(once)]).to.satisfy(([out, value]: string[]) => cpu.test(out) && value === '499500');
    const last = await run('%time 6 * 7');
    expect([printed(last), result(last)]).to.satisfy(([out, value]: string[]) => cpu.test(out) && value === '42');
    const cell = await run('%%time\nz = 3\nz + 1');
    expect([printed(cell), result(cell)]).to.satisfy(([out, value]: string[]) => cpu.test(out) && value === '4');
    // its statement is Python, not expanded: a dict's braces stay braces
    expect(printed(await run("%timeit -n 3 -r 2 d = {'a': 1}"))).to.match(
      /^[\d.]+ [mµn]?s ± [\d.]+ [mµn]?s per loop \(mean ± std\. dev\. of 2 runs, 3 loops each\)\n$/,
    );
    expect(printed(await run('%%timeit -n 2 -r 1 base = 5\nbase * 2'))).to.match(
      /per loop \(mean ± std\. dev\. of 1 run, 2 loops each\)\n$/,
    );
    // without -n, loops until a run takes 0.2 s; -q says nothing
    const quiet = await run('%timeit -r 1 -q x = 1');
    expect(quiet.filter((e) => e.type === 'stdout' || e.type === 'error')).to.deep.equal([]);
    const bad = (await run('%timeit -x 1')).find((e) => e.type === 'error');
    expect(bad?.name).to.equal('UsageError');
  });

  it('gives long output whole: in pieces of at most 64 KiB, a character cut by a read put back together', async () => {
    const long = await execute({ code: 'print("x" * 200000, end="")' });
    expect(printed(long)).to.equal('x'.repeat(200_000));
    expect(Math.max(...long.map((e) => e.text?.length ?? 0))).to.be.at.most(64 * 1024);
    // two-byte characters from a process the cell starts, read from its pipe 64 KiB at a time
    const wide = await execute({
      code: 'import subprocess, sys\nsubprocess.run([sys.executable, "-c", "import sys; sys.stdout.write(chr(233) * 70001)"])',
    });
    expect(printed(wide)).to.equal('é'.repeat(70_001));
  });

  it('says an error with its name, value and the cell’s traceback, and runs on after it', async () => {
    const err = (await execute({ code: 'def f():\n  return 1 / 0\nf()' })).find((e) => e.type === 'error')!;
    expect(err).to.include({ name: 'ZeroDivisionError', value: 'division by zero' });
    expect(err.traceback).to.match(/File "<cell>", line 2, in f/);
    expect(err.traceback).to.not.match(/code-interpreter\.py/);
    // what the cell called is in it too
    const deep = (await execute({ code: 'import json\njson.loads("{")' })).find((e) => e.type === 'error')!;
    expect(deep.name).to.equal('JSONDecodeError');
    expect(deep.traceback).to.match(/File "<cell>", line 2[\s\S]*json/);
    expect((await execute({ code: 'syntax error here' })).find((e) => e.type === 'error')?.name).to.equal(
      'SyntaxError',
    );
    expect((await execute({ code: '"still here"' }))[0].text).to.equal("'still here'");
  });

  it('gives a cell its env_vars and puts the environment back after it', async () => {
    const env = await execute({ code: 'import os\nos.environ["SVC_T"]', env_vars: { SVC_T: 'v' } });
    expect(env[0].text).to.equal("'v'");
    expect((await execute({ code: 'os.environ.get("SVC_T")' })).map((e) => e.type)).to.not.include('result');
    expect((await post('/execute', { code: '1', env_vars: { A: 1 } })).status).to.equal(400);
  });

  it("runs every cell with the sandbox's envs from --envs, read again when the file changes, under the cell's", async () => {
    const both = 'import os\nprint(os.environ.get("SVC_A"), os.environ.get("SVC_B"))';
    const shell = { code: 'echo "$SVC_A $SVC_B"', language: 'bash' };
    const text = async (body: Record<string, unknown>) => printed(await execute(body));
    expect(await text({ code: both })).to.equal('None None\n');
    writeFileSync(envsFile, JSON.stringify({ SVC_A: 'one', SVC_B: 'sandbox' }));
    expect(await text({ code: both, env_vars: { SVC_B: 'cell' } })).to.equal('one cell\n');
    // the sandbox's envs stay the kernel's after a cell (what it left running sees them); the cell's do not
    expect(await text({ code: both })).to.equal('one sandbox\n');
    expect(await text(shell)).to.equal('one sandbox\n');
    // written anew (another size, as svc's upload replaces it)
    writeFileSync(envsFile, JSON.stringify({ SVC_A: 'changed' }));
    expect(await text({ code: both })).to.equal('changed sandbox\n');
    expect(await text(shell)).to.equal('changed \n');
    // a file that is not an object of strings is no envs
    writeFileSync(envsFile, '["SVC_A"]');
    expect(await text(shell)).to.equal(' \n');
    rmSync(envsFile);
  });

  it('keeps contexts apart, each in its folder; restarts and removes them', async () => {
    const made = await post('/contexts', { cwd: '/' });
    const ctx = (await made.json()) as { id: string; language: string; cwd: string };
    expect(ctx).to.include({ language: 'python', cwd: '/' });
    const own = await execute({ code: 'import os\nos.getcwd()', context_id: ctx.id });
    expect(own[0].text).to.equal("'/'");
    expect((await execute({ code: 'x', context_id: ctx.id })).find((e) => e.type === 'error')?.name).to.equal(
      'NameError',
    );
    await execute({ code: 'z = 5', context_id: ctx.id });
    expect((await post(`/contexts/${ctx.id}/restart`)).status).to.equal(204);
    expect((await execute({ code: 'z', context_id: ctx.id })).find((e) => e.type === 'error')?.name).to.equal(
      'NameError',
    );
    const ids = ((await (await fetch(`${base}/contexts`)).json()) as { id: string }[]).map((c) => c.id);
    expect(ids).to.include(ctx.id);
    expect((await fetch(`${base}/contexts/${ctx.id}`, { method: 'DELETE' })).status).to.equal(204);
    expect((await post('/execute', { code: '1', context_id: ctx.id })).status).to.equal(404);
    expect((await post('/contexts', { language: 'cobol' })).status).to.equal(400);
    expect((await post('/contexts', { cwd: '/no/such/folder' })).status).to.equal(400);
  });

  it("runs JavaScript cells in a node kernel (E2B's `js`): state kept, a top-level await, output in order, errors, an interrupt", async () => {
    const js = (code: string, more: Record<string, unknown> = {}, signal?: AbortSignal) =>
      execute({ code, language: 'js', ...more }, signal);
    const first = await js(
      'const xs = [1, 2, 3]\nconsole.log("one")\nrequire("child_process").execSync("echo two", { stdio: "inherit" })\nconsole.error("three")\nxs.map((v) => v * 2)',
    );
    expect(first.slice(0, 4)).to.deep.equal([
      { type: 'stdout', text: 'one\n' },
      { type: 'stdout', text: 'two\n' },
      { type: 'stderr', text: 'three\n' },
      { type: 'result', is_main_result: true, text: '[ 2, 4, 6 ]' },
    ]);
    // `const` and `let` stay for the next cell, as an await's value does; a cell's env_vars are its own
    const later = await js(
      'const n = await new Promise((r) => setTimeout(() => r(xs.length), 20));\n[n, process.env.K]',
      {
        env_vars: { K: 'v' },
      },
    );
    expect(later[0]).to.include({ type: 'result', text: "[ 3, 'v' ]" });
    expect((await js('[n, process.env.K]'))[0]).to.include({ text: '[ 3, undefined ]' });
    // an error: its name, message and the cell's frames; a cell cut short is a SyntaxError
    const [failed] = await js('let y = 1\nnull.foo');
    expect(failed).to.include({
      type: 'error',
      name: 'TypeError',
      value: "Cannot read properties of null (reading 'foo')",
    });
    expect(failed.traceback)
      .to.match(/at cell:2:/)
      .and.not.match(/code-interpreter-js|node:repl/);
    expect((await js('function f() {'))[0]).to.include({ type: 'error', name: 'SyntaxError' });
    // a caller that goes away interrupts a loop and an await alike; the kernel and its variables stay
    for (const code of ['while (true) {}', 'await new Promise(() => {})']) {
      const ac = new AbortController();
      const stuck = js(code, {}, ac.signal).catch((e: Error) => e);
      setTimeout(() => ac.abort(), 500);
      expect(await stuck).to.be.instanceOf(Error);
      expect((await js('xs.length + y'))[0]).to.include({ type: 'result', text: '4' });
    }
    // an await interrupted goes on unwatched: its later rejection ends no other cell, said on stderr
    const ac = new AbortController();
    const late = js('await new Promise((_, no) => setTimeout(() => no(new Error("late")), 600))', {}, ac.signal);
    setTimeout(() => ac.abort(), 200);
    expect(await late.catch((e: Error) => e)).to.be.instanceOf(Error);
    const after = await js('await new Promise((r) => setTimeout(r, 1200)); xs.length');
    expect(after.filter((e) => e.type === 'error')).to.deep.equal([]);
    const stderr = after
      .filter((e) => e.type === 'stderr')
      .map((e) => e.text)
      .join('');
    expect(stderr).to.match(/^Uncaught Error: late\n {4}at Timeout._onTimeout \(cell:1:\d+\)\n/);
    expect(after.find((e) => e.type === 'result')).to.include({ text: '3' });
    // static imports (which Node's REPL refuses) run as dynamic ones, on their lines; their names stay
    const imported = await js(
      "import { join as j } from 'node:path'\nimport * as os2 from 'node:os'\nimport fs, {\n  existsSync,\n} from 'node:fs';\nj('a', 'b')",
    );
    expect(imported.find((e) => e.type !== 'stdout' && e.type !== 'stderr')).to.include({ text: "'a/b'" });
    expect((await js('[typeof os2.hostname, typeof fs.readFileSync, existsSync("/")]'))[0]).to.include({
      text: "[ 'function', 'function', true ]",
    });
    const [missing] = await js("import 'node:path'\n\nimport { nope } from './no-such-module.mjs'");
    expect(missing).to.include({ type: 'error' });
    expect(missing.value).to.match(/no-such-module/);
    // a context of its own (`javascript` names it too), in its folder, without the default's variables
    const made = (await (await post('/contexts', { language: 'javascript', cwd: dir })).json()) as {
      id: string;
      language: string;
    };
    expect(made.language).to.equal('js');
    expect((await execute({ code: 'process.cwd()', context_id: made.id }))[0].text).to.equal(`'${dir}'`);
    expect((await execute({ code: 'xs', context_id: made.id }))[0]).to.include({
      type: 'error',
      name: 'ReferenceError',
    });
  });

  it("runs TypeScript cells (the SDK's `typescript`, `ts`): types stripped, not checked; state kept; lines kept for errors", async () => {
    const ts = (code: string, more: Record<string, unknown> = {}) => execute({ code, language: 'ts', ...more });
    const first = await ts(
      [
        'interface Point { x: number; y: number }',
        'enum Color { Red = 1, Green }',
        'type Pair<T> = [T, T]',
        'const p: Point = { x: 3, y: 4 }',
        'function norm(q: Point): number { return Math.hypot(q.x, q.y) }',
        'const pair: Pair<string> = ["a", "b"]',
        'console.log(pair.join("") as string);',
        '[norm(p), Color.Green, Color[1]] as const',
      ].join('\n'),
    );
    expect(first.slice(0, 2)).to.deep.equal([
      { type: 'stdout', text: 'ab\n' },
      { type: 'result', is_main_result: true, text: "[ 5, 2, 'Red' ]" },
    ]);
    // the next cell sees the last one's names; a top-level await with a generic; a class with typed fields
    const later = await ts(
      'class Box<T> { constructor(private readonly v: T) {} get(): T { return this.v } }\n' +
        'const b = new Box<number>(await Promise.resolve<number>(norm(p)))\nb.get() + Color.Red',
    );
    expect(later[0]).to.include({ type: 'result', text: '6' });
    // an import, its type-only names gone with the types
    const named = await ts(
      "import { basename, type ParsedPath } from 'node:path'\nconst leaf: string = basename('/x/y.ts')\nleaf",
    );
    expect(named[0]).to.include({ type: 'result', text: "'y.ts'" });
    // types are not checked (as Deno's kernel does not): a wrong one runs as JavaScript would
    expect((await ts('const s: number = "not a number" as any\ntypeof s'))[0]).to.include({ text: "'string'" });
    // an error thrown on line 3 of a cell says line 3: the stripped cell keeps its lines
    const [thrown] = await ts('type N = number\nconst k: N = 1\nthrow new RangeError("no " + k)');
    expect(thrown).to.include({ type: 'error', name: 'RangeError', value: 'no 1' });
    expect(thrown.traceback).to.match(/at cell:3:/);
    // what does not parse as TypeScript is the cell's SyntaxError, with where
    const [bad] = await ts('const q: = 1');
    expect(bad).to.include({ type: 'error', name: 'SyntaxError' });
    expect(bad.value).to.match(/\(1:\d+\)/);
    // a context of its own (`typescript` names it too); a JavaScript context does not take types
    const made = (await (await post('/contexts', { language: 'typescript' })).json()) as {
      id: string;
      language: string;
    };
    expect(made.language).to.equal('ts');
    expect((await execute({ code: 'let t: string = "x"; t', context_id: made.id }))[0]).to.include({ text: "'x'" });
    expect((await execute({ code: 'let t: string = "x"', language: 'js' }))[0]).to.include({
      type: 'error',
      name: 'SyntaxError',
    });
  });

  it('runs bash cells, with an exit status other than 0 as an error', async () => {
    const ok = await execute({ code: 'echo $((6 * 7)); echo err >&2', language: 'bash' });
    expect(ok.filter((e) => e.type !== 'end_of_execution')).to.have.deep.members([
      { type: 'stdout', text: '42\n' },
      { type: 'stderr', text: 'err\n' },
    ]);
    const failed = await execute({ code: 'exit 3', language: 'bash' });
    expect(failed[0]).to.include({ type: 'error', value: 'exit status 3' });
  });

  it('interrupts a cell whose caller went away, and starts a kernel again after it died', async () => {
    const ac = new AbortController();
    const started = Date.now();
    const slow = execute({ code: 'import time\ntime.sleep(30)' }, ac.signal).catch((e: Error) => e);
    setTimeout(() => ac.abort(), 500);
    expect(await slow).to.be.instanceOf(Error);
    // the next cell runs at once: the sleeping one was interrupted, not waited for
    expect((await execute({ code: '"next"' }))[0].text).to.equal("'next'");
    expect(Date.now() - started).to.be.below(15_000);
    // (a process it started lives on: it holds nothing that would hide the kernel's end)
    const died = await execute({ code: 'import os\nos.system("sleep 100 &")\nos._exit(1)' });
    expect(died[0]).to.include({ type: 'error', name: 'KernelDied' });
    expect((await execute({ code: 'x' })).find((e) => e.type === 'error')?.name).to.equal('NameError');
  });

  it("gives matplotlib's figures as results, a PNG and E2B's chart: at plt.show(), and those a cell leaves open after it", async () => {
    const shown = await execute({
      code: [
        'import matplotlib.pyplot as plt',
        'plt.plot([1, 2, 3], [1, 4, 9], label="squares")',
        'plt.title("growth"); plt.xlabel("n"); plt.ylabel("n squared")',
        'plt.show()',
        'print("after")',
      ].join('\n'),
    });
    // the figure when plt.show() ran: before what the cell printed after it
    expect(shown.map((e) => e.type)).to.deep.equal(['result', 'stdout', 'number_of_executions', 'end_of_execution']);
    const [figure] = shown;
    expect(figure).to.include({ is_main_result: false, text: '<Figure size 640x480 with 1 Axes>' });
    expect(Buffer.from(figure.png!, 'base64').subarray(0, 8).equals(PNG), 'a PNG').to.equal(true);
    expect(figure.chart).to.deep.include({
      type: 'line',
      title: 'growth',
      x_label: 'n',
      y_label: 'n squared',
      x_scale: 'linear',
      elements: [
        {
          label: 'squares',
          points: [
            [1, 1],
            [2, 4],
            [3, 9],
          ],
        },
      ],
    });
    expect(figure.chart!.x_ticks!.length).to.equal(figure.chart!.x_tick_labels!.length).and.above(1);
    expect(
      figure.chart!.x_tick_labels!.some((t) => /^2\.0*$/.test(t)),
      'the tick labels as drawn',
    ).to.equal(true);

    // a figure the cell leaves open comes after the cell's value, once: the next cell has none
    const left = await execute({
      code: 'fig, ax = plt.subplots()\nax.bar(["a", "b", "c"], [3, 1, 2.5], label="n")\n7',
    });
    const results = left.filter((e) => e.type === 'result');
    expect(results.map((e) => [e.is_main_result, e.text])).to.deep.equal([
      [true, '7'],
      [false, '<Figure size 640x480 with 1 Axes>'],
    ]);
    expect(results[1].chart).to.deep.include({
      type: 'bar',
      elements: [
        { label: 'a', value: '3', group: 'n' },
        { label: 'b', value: '1', group: 'n' },
        { label: 'c', value: '2.5', group: 'n' },
      ],
    });
    expect((await execute({ code: 'len(plt.get_fignums())' }))[0].text).to.equal('0');
    // a figure that cannot be drawn (bad TeX) is the cell's error; the other figure is still shown
    const bad = await execute({ code: 'plt.figure(); plt.text(0, 0, r"$\\frac{a}{$")\nplt.figure(); plt.plot([1]);' });
    expect(bad.map((e) => e.type)).to.deep.equal(['result', 'error', 'number_of_executions', 'end_of_execution']);
    expect(bad[1]).to.include({ name: 'ValueError' });
    expect((await execute({ code: 'len(plt.get_fignums())' }))[0].text).to.equal('0');
    // a figure as the cell's value is its main result, with its picture
    const value = await execute({
      code: 'import matplotlib.figure\nf = matplotlib.figure.Figure()\nf.add_subplot().plot([0, 1])\nf',
    });
    expect(value[0]).to.include({ type: 'result', is_main_result: true });
    expect(Buffer.from(value[0].png!, 'base64').subarray(0, 8).equals(PNG)).to.equal(true);
    expect(value[0].chart?.elements).to.deep.equal([
      {
        label: '',
        points: [
          [0, 0],
          [1, 1],
        ],
      },
    ]);
  });

  it("reads pies, scatters, dates, box plots and several axes as E2B's chart types; a cell that ends with `;` shows no value; %matplotlib inline is the default, and a program a cell starts has its own backend", async () => {
    const chart = async (code: string): Promise<Chart> => {
      const events = await execute({ code: `import matplotlib.pyplot as plt\n${code}` });
      const figures = events.filter((e) => e.type === 'result' && e.chart);
      expect(figures, JSON.stringify(events).slice(0, 500)).to.have.length(1);
      return figures[0].chart!;
    };
    expect(await chart('plt.pie([1, 1, 2], labels=["x", "y", "z"]); plt.title("share")')).to.deep.equal({
      type: 'pie',
      title: 'share',
      elements: [
        { label: 'x', angle: 90, radius: 1 },
        { label: 'y', angle: 90, radius: 1 },
        { label: 'z', angle: 180, radius: 1 },
      ],
    });
    const dots = await chart('plt.scatter([1, 2], [3, 4], label="dots")');
    expect(dots).to.deep.include({
      type: 'scatter',
      elements: [
        {
          label: 'dots',
          points: [
            [1, 3],
            [2, 4],
          ],
        },
      ],
    });
    const dated = await chart(
      'import datetime\nplt.plot([datetime.date(2024, 1, 1), datetime.date(2024, 1, 3)], [5, 6])',
    );
    expect(dated).to.deep.include({
      x_scale: 'datetime',
      elements: [
        {
          label: '',
          points: [
            ['2024-01-01', 5],
            ['2024-01-03', 6],
          ],
        },
      ],
    });
    expect(String(dated.x_ticks![0])).to.match(/^2024-01-0\dT/);
    const both = await chart(
      'fig, (a, b) = plt.subplots(1, 2)\na.plot([0, 1], [0, 1])\nb.barh(["p", "q"], [2, 3])\nfig.suptitle("two")',
    );
    expect(both.type).to.equal('superchart');
    expect(both.title).to.equal('two');
    expect(both.elements.map((c) => c.type)).to.deep.equal(['line', 'bar']);
    expect(both.elements[1].elements).to.deep.equal([
      { label: 'p', value: '2', group: '' },
      { label: 'q', value: '3', group: '' },
    ]);

    // a box plot's numbers, from the statistics it was drawn from
    expect(await chart('plt.boxplot([[1, 2, 3, 4, 20], [2, 3, 4]], labels=["a", "b"])')).to.deep.include({
      type: 'box_and_whisker',
      elements: [
        { label: 'a', min: 1, first_quartile: 2, median: 3, third_quartile: 4, max: 4, outliers: [20] },
        { label: 'b', min: 2, first_quartile: 2.5, median: 3, third_quartile: 3.5, max: 4, outliers: [] },
      ],
    });
    // the same on a figure made without pyplot, in a kernel that never imports it
    const bare = ((await (await post('/contexts')).json()) as { id: string }).id;
    const made = await execute({
      code: 'from matplotlib.figure import Figure\nf = Figure()\nf.add_subplot().boxplot([[1, 2, 3, 4, 20]])\nf',
      context_id: bare,
    });
    expect(made.find((e) => e.type === 'result')?.chart).to.deep.include({
      type: 'box_and_whisker',
      elements: [{ label: '1', min: 1, first_quartile: 2, median: 3, third_quartile: 4, max: 4, outliers: [20] }],
    });
    expect((await fetch(`${base}/contexts/${bare}`, { method: 'DELETE' })).status).to.equal(204);
    // a cell that ends with `;` shows no value, as in IPython: its figure alone
    const quiet = await execute({ code: 'plt.plot([1, 2]);  # the line' });
    expect(quiet.filter((e) => e.type === 'result').map((e) => e.text)).to.deep.equal([
      '<Figure size 640x480 with 1 Axes>',
    ]);
    expect((await execute({ code: 'z = "a;"\nz' }))[0].text).to.equal("'a;'");

    // %config InlineBackend.figure_format(s): twice the pixels for 'retina', SVG's text, JPEG
    const width = async (): Promise<number> => {
      const [r] = (await execute({ code: 'plt.figure(); plt.plot([1, 2]);' })).filter((e) => e.type === 'result');
      return Buffer.from(r.png!, 'base64').readUInt32BE(16);
    };
    const plain = await width();
    await execute({ code: '%config InlineBackend.figure_format = "retina"' });
    expect(await width()).to.be.within(plain * 2 - 4, plain * 2 + 4);
    await execute({ code: '%config InlineBackend.figure_formats = {"svg", "jpeg"}' });
    const [formats] = (await execute({ code: 'plt.plot([1, 2]);' })).filter((e) => e.type === 'result');
    expect(formats).to.not.have.property('png');
    expect((formats as { svg?: string }).svg).to.match(/<svg[\s\S]*<\/svg>/);
    expect(
      Buffer.from((formats as { jpeg?: string }).jpeg!, 'base64')
        .subarray(0, 2)
        .toString('hex'),
    ).to.equal('ffd8');
    const unknown = await execute({ code: '%config InlineBackend.figure_format = "gif"' });
    expect(unknown[0]).to.include({ type: 'error', name: 'UsageError' });
    await execute({ code: '%config InlineBackend.figure_format = "png"' });

    expect((await execute({ code: '%matplotlib inline' })).map((e) => e.type)).to.deep.equal([
      'number_of_executions',
      'end_of_execution',
    ]);
    const refused = (await execute({ code: '%matplotlib qt' })).find((e) => e.type === 'error');
    expect(refused).to.include({ name: 'UsageError' });
    expect(refused!.value).to.match(/no screen/);
    // MPLBACKEND is not set for what the cell starts: a program's pyplot does not look for the kernel's backend
    const child = await execute({
      code: 'import subprocess, sys\nsubprocess.run([sys.executable, "-c", "import matplotlib.pyplot as p; p.plot([1]); print(p.get_backend())"]).returncode',
    });
    expect(printed(child).toLowerCase()).to.equal('agg\n');
    expect(child.find((e) => e.type === 'result')?.text).to.equal('0');
  });

  it("gives a pandas DataFrame's columns as E2B's data, beside its HTML table, and its plot as a figure", async () => {
    const events = await execute({
      code: [
        'import pandas as pd, numpy as np',
        'df = pd.DataFrame({"n": [1, 2, 3], "x": [0.5, np.nan, 2.0], "s": ["a", None, "c"],',
        '                   "t": pd.to_datetime(["2024-01-01", None, "2024-03-01"]), "b": [True, False, True]})',
        'df.plot(x="n", y="x", title="by n")',
        'df',
      ].join('\n'),
    });
    const [value, figure] = events.filter((e) => e.type === 'result');
    expect(value.is_main_result).to.equal(true);
    expect(value.html).to.match(/^<div>[\s\S]*<table/);
    expect(value.data).to.deep.equal({
      n: [1, 2, 3],
      x: [0.5, null, 2],
      s: ['a', null, 'c'],
      t: ['2024-01-01T00:00:00', null, '2024-03-01T00:00:00'],
      b: [true, false, true],
    });
    expect(figure.chart).to.deep.include({ type: 'line', title: 'by n', x_label: 'n' });
    expect(figure.chart!.elements).to.deep.equal([
      {
        label: 'x',
        points: [
          [1, 0.5],
          [3, 2],
        ],
      },
    ]);
  });

  it("says how to get a package E2B's template has and the sandbox has not", async () => {
    // scikit-learn is in E2B's template, not in the debian image, and not among this host's test packages
    const [missing] = await execute({ code: 'from sklearn import datasets' });
    expect(missing).to.include({ type: 'error', name: 'ModuleNotFoundError' });
    expect(missing.value).to.equal(
      "No module named 'sklearn' (not in this sandbox: `!apt-get install -y python3-sklearn` or `%pip install scikit-learn` puts it there)",
    );
    const [other] = await execute({ code: 'import svc_no_such_module' });
    expect(other.value).to.equal("No module named 'svc_no_such_module'");
  });

  it('imports the --preload modules it has in the warm-up cell, binding no name, and skips those it has not', async () => {
    // modules of the standard library that neither the server nor its kernel imports itself
    const warm = join(dir, 'warm-preload');
    const [other, url] = await serve(['--warm', warm, '--preload', 'wave,svc_no_such_module,xml.dom.minidom']);
    try {
      await waitUntil('the warm-up cell ran', () => existsSync(warm), { ms: 15_000 });
      const [seen] = await execute(
        {
          code: 'import sys\n[m in sys.modules for m in ("wave", "xml.dom.minidom", "tarfile")] + [n in globals() for n in ("wave", "xml", "_")]',
        },
        undefined,
        url,
      );
      expect(seen).to.include({ type: 'result', text: '[True, True, False, False, False, False]' });
      const [count] = (await execute({ code: '1' }, undefined, url)).filter((e) => e.type === 'number_of_executions');
      expect(count.execution_count, 'the warm-up cell is not counted').to.equal(2);
    } finally {
      other.kill();
    }
  });

  it('answers 404 to a path it does not serve and 400 to a body that is not an object', async () => {
    expect((await fetch(`${base}/nope`)).status).to.equal(404);
    expect((await post('/execute', [1])).status).to.equal(400);
    expect((await post('/execute', { code: 7 })).status).to.equal(400);
  });
});
