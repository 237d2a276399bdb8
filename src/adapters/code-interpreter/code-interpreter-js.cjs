'use strict';
/*
 * svc's JavaScript kernel: a context of language "js" in code-interpreter.py (E2B's `language: 'js'`)
 * runs its cells here, in one node process that keeps their state, as the Python kernel does and
 * speaking its protocol: `node code-interpreter-js.cjs FD NONCE`; one JSON request a line on stdin ({code,
 * env, base, counted}); JSON events on descriptor FD, each after a mark (NUL, RS, `svc-mark-NONCE:`,
 * its number, NUL) on descriptors 1 and 2, so the server sends what a cell printed before an event
 * before it. Cells are evaluated as Node's REPL evaluates a line (its own eval: a top-level `await`,
 * `const` and `let` kept for the next cell, `require`; static imports made dynamic first), with
 * what `console.log` and the processes a cell starts print as stdout and stderr, the value of the
 * last expression as the result (util.inspect's text), and a SIGINT from the server interrupting a
 * cell. With `--typescript` after the nonce it is a TypeScript context's kernel: each cell's types
 * are stripped first by sucrase (code-interpreter-ts.cjs beside this file, bundled by `npm run
 * build`), which keeps the cell's lines where they were and checks no type (as Deno's kernel in
 * E2B's template does not).
 */
const { AsyncLocalStorage } = require('node:async_hooks');
const fs = require('node:fs');
const readline = require('node:readline');
const repl = require('node:repl');
const { PassThrough } = require('node:stream');
const util = require('node:util');

const events = Number(process.argv[2]);
/** A TypeScript context's type stripper: sucrase's `transform`. */
const sucrase = process.argv[4] === '--typescript' ? require('./code-interpreter-ts.cjs') : undefined;
const mark = Buffer.concat([Buffer.from([0, 0x1e]), Buffer.from(`svc-mark-${process.argv[3]}:`)]);
let seq = 0;
let count = 0;
/** Which cell's code an error came from: each cell runs in a context of its own number. */
const cells = new AsyncLocalStorage();
/** The number of the cell running now (the last one run, between cells). */
let current = 0;

/** Writes all of `data` to descriptor `fd`. */
function writeAll(fd, data) {
  for (let at = 0; at < data.length;) at += fs.writeSync(fd, data, at);
}

/** An event: its mark on both pipes after what was printed before it, then the event. */
function emit(event) {
  seq += 1;
  for (const fd of [1, 2]) {
    try {
      writeAll(fd, Buffer.concat([mark, Buffer.from(`${seq}\0`)]));
    } catch {
      // a pipe the server no longer reads: it sends what it has
    }
  }
  writeAll(events, Buffer.from(`${JSON.stringify({ ...event, seq })}\n`));
}

/** An error as E2B's: its name, its message and its stack without the REPL's own frames. */
function errorEvent(err) {
  if (err instanceof repl.Recoverable) err = err.err; // input that ended too soon: a SyntaxError
  if (!(err instanceof Error)) return { type: 'error', name: 'Error', value: util.inspect(err), traceback: '' };
  const interrupted = err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
  return {
    type: 'error',
    name: interrupted ? 'KeyboardInterrupt' : err.name,
    value: interrupted ? 'interrupted' : err.message,
    traceback: interrupted ? '' : cellStack(err),
  };
}

/** An error's stack, the cell's frames and what it called: those of this kernel and the REPL's below them go. */
function cellStack(err) {
  const lines = String(err.stack ?? '').split('\n');
  const own = lines.findIndex(
    (line) => line.includes(__filename) || /[( ]node:(vm|internal\/vm|repl|domain):/.test(line),
  );
  return (own < 0 ? lines : lines.slice(0, own)).join('\n');
}

// The REPL reads nothing (cells come as requests) and prints no prompt; its eval is what runs a cell.
const server = repl.start({
  input: new PassThrough(),
  output: process.stdout,
  prompt: '',
  terminal: false,
  useGlobal: true,
  ignoreUndefined: true,
  breakEvalOnSigint: true,
});
/** How the running cell ends: with its error, or with its value. Undefined between cells. */
let finish;

// A SIGINT while a cell's code runs is the REPL's (its eval breaks out of the code: the cell's
// error); one while the cell awaits ends the cell here (what it awaited is left to itself); one
// between cells is no reason to end. A listener of the process's own while the code runs would
// keep the REPL's from breaking out of it, so there is one only while none runs.
const interruption = () => Object.assign(new Error('interrupted'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' });
const onSigint = () => finish?.(interruption());
process.on('SIGINT', onSigint);
// The REPL's eval gives what a cell throws (or its await rejects with) to the REPL's domain, which
// would print it and call nobody back: it is the running cell's error when it came from that
// cell's code (or from nowhere known), else (a timer's between cells, the await of a cell that
// was interrupted rejecting later) said on stderr as Node's REPL says it, ending no cell.
const domain = server._domain;
if (typeof domain?.on !== 'function') throw new Error("svc's JavaScript kernel: this node's REPL has no domain");
domain.removeAllListeners('error');
domain.on('error', (err) => {
  const from = cells.getStore();
  if (finish && (from === undefined || from === current)) finish(err);
  else process.stderr.write(`Uncaught ${err instanceof Error ? cellStack(err) : util.inspect(err)}\n`);
});

/**
 * A TypeScript cell as JavaScript: its types, interfaces and `import type`s gone, its enums made
 * objects, everything else (a top-level await, `const`, the last expression) as it was. What does
 * not parse is the cell's SyntaxError, with sucrase's line and column.
 */
function stripTypes(code) {
  try {
    return sucrase.transform(code, { transforms: ['typescript'], disableESTransforms: true }).code;
  } catch (err) {
    throw new SyntaxError(err instanceof Error ? err.message : String(err));
  }
}

/**
 * A static `import` at the start of a line, as far as its module's name: what comes between is its
 * clause (`X`, `* as NS`, `{ a, b as c }`, `X, { a }`, or nothing), over lines too.
 */
const STATIC_IMPORT = /^([ \t]*)import\b([^'"`;]*?)(['"][^'"\n]+['"])[ \t]*;?/gm;
const NAME = '[A-Za-z_$][\\w$]*';
const CLAUSE = new RegExp(`^(?:(${NAME})\\s*(?:,\\s*)?)?(?:\\*\\s*as\\s+(${NAME})|\\{([^}]*)\\})?$`);
const SPECIFIER = new RegExp(`^(${NAME})(?:\\s+as\\s+(${NAME}))?$`);

/**
 * A cell's static imports as the dynamic ones Node's REPL runs (it refuses `import` statements):
 * `import X, { a, b as c } from 'm'` is `const { default: X, a, b: c } = await import('m');`,
 * `import * as NS from 'm'` is `const NS = await import('m');`, `import 'm'` is `await import('m');`,
 * each on the lines it took, so the names stay for the next cell as a `const`'s do. What is not
 * one of these forms is left as it is (and is the REPL's error).
 */
function dynamicImports(code) {
  return code.replace(STATIC_IMPORT, (whole, indent, clause, module) => {
    let c = clause.trim();
    if (c && !/\bfrom$/.test(c)) return whole;
    c = c.replace(/\s*\bfrom$/, '');
    const parts = CLAUSE.exec(c);
    if (!parts) return whole;
    const [, def, ns, named] = parts;
    const lines = '\n'.repeat(whole.split('\n').length - 1);
    const load = `await import(${module})`;
    if (!c) return `${indent}${load};${lines}`;
    if (ns) return `${indent}const ${ns} = ${load}${def ? `, ${def} = ${ns}.default` : ''};${lines}`;
    const fields = def ? [`default: ${def}`] : [];
    for (const spec of (named ?? '').split(',').map((x) => x.trim())) {
      if (!spec) continue;
      const m = SPECIFIER.exec(spec);
      if (!m) return whole;
      fields.push(m[2] ? `${m[1]}: ${m[2]}` : m[1]);
    }
    return `${indent}const { ${fields.join(', ')} } = ${load};${lines}`;
  });
}

/** Runs one request's cell; resolves when its events are sent. */
function run(req) {
  Object.assign(process.env, req.base ?? {});
  const env = req.env ?? {};
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  if (req.counted !== false) count += 1;
  return new Promise((resolve) => {
    const mine = (err, value) => {
      if (finish !== mine) return; // the end of a cell that was interrupted while it awaited
      finish = undefined;
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      if (err) emit(errorEvent(err));
      else if (value !== undefined) emit({ type: 'result', is_main_result: true, text: util.inspect(value) });
      emit({ type: 'number_of_executions', execution_count: count });
      emit({ type: 'done' });
      resolve();
    };
    finish = mine;
    current += 1;
    process.removeListener('SIGINT', onSigint);
    try {
      const code = dynamicImports(sucrase ? stripTypes(req.code) : req.code);
      cells.run(current, () => server.eval(code, server.context, 'cell', mine));
    } catch (err) {
      mine(err);
    } finally {
      process.on('SIGINT', onSigint);
    }
  });
}

// one cell at a time, in the order they came
let last = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const req = JSON.parse(line);
  last = last.then(() => run(req));
});
