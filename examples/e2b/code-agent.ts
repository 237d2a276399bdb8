// A code-running agent loop in the shape of E2B's own examples, unchanged but for the two
// environment variables that point the SDK at svc (docs/e2b.md):
//
//   E2B_API_URL=http://127.0.0.1:7474/e2b E2B_SANDBOX_URL=http://127.0.0.1:7474/e2b/envd \
//   E2B_API_KEY=$SVC_TOKEN node dist/examples/e2b/code-agent.js
//
// The "model" here is a fixed list of steps, so the example runs without an LLM: each step is code
// the agent writes to a file in the sandbox, runs, and reads the result of.
import { Sandbox } from 'e2b';

const steps = [
  { file: 'step1.sh', code: 'echo "kernel: $(uname -r)"' },
  { file: 'step2.sh', code: 'for i in 1 2 3; do echo "square of $i is $((i * i))"; done' },
  { file: 'step3.sh', code: 'echo "this step fails" >&2; exit 2' },
];

export async function main(): Promise<string[]> {
  const sandbox = await Sandbox.create({ timeoutMs: 5 * 60_000, metadata: { example: 'code-agent' } });
  const transcript: string[] = [];
  try {
    for (const step of steps) {
      const path = `/tmp/agent/${step.file}`;
      await sandbox.files.write(path, step.code);
      try {
        const r = await sandbox.commands.run(`sh ${path}`, { timeoutMs: 60_000 });
        transcript.push(`${step.file}: ok: ${r.stdout.trim()}`);
      } catch (err) {
        // E2B's CommandExitError: the step failed; an agent would show the model the error
        const e = err as { exitCode?: number; stderr?: string };
        transcript.push(`${step.file}: exit ${e.exitCode}: ${e.stderr?.trim()}`);
      }
    }
    const files = await sandbox.files.list('/tmp/agent');
    transcript.push(`files: ${files.map((f) => f.name).join(', ')}`);
  } finally {
    await sandbox.kill();
  }
  return transcript;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    (t) => console.log(t.join('\n')),
    (err: Error) => {
      console.error(err.message);
      process.exit(1);
    },
  );
}
