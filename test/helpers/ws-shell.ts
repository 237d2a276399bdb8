import WebSocket from 'ws';

export interface ShellClient {
  ws: WebSocket;
  output(): string;
  waitFor(re: RegExp, timeoutMs?: number): Promise<string>;
  send(text: string): void;
  resize(cols: number, rows: number): void;
  exit: Promise<{ exit_code: number; closeCode: number }>;
}

/** Opens a shell WebSocket (with subprotocols, as the dashboard asks) and collects terminal output. */
export function openShell(
  url: string,
  headers: Record<string, string> = {},
  protocols?: string[],
): Promise<ShellClient> {
  return new Promise((resolve, reject) => {
    const ws = protocols ? new WebSocket(url, protocols, { headers }) : new WebSocket(url, { headers });
    let out = '';
    let exitCode = -999;
    const waiters: (() => void)[] = [];
    ws.on('message', (data, isBinary) => {
      const text = Buffer.isBuffer(data) ? data.toString('utf8') : String(data);
      if (isBinary) out += text;
      else {
        const msg = JSON.parse(text) as { type: string; exit_code: number };
        if (msg.type === 'exit') exitCode = msg.exit_code;
      }
      for (const w of waiters.splice(0)) w();
    });
    const exit = new Promise<{ exit_code: number; closeCode: number }>((r) =>
      ws.on('close', (code) => r({ exit_code: exitCode, closeCode: code })),
    );
    ws.on('unexpected-response', (_req, res) =>
      reject(Object.assign(new Error(`upgrade refused: ${res.statusCode}`), { status: res.statusCode })),
    );
    ws.on('error', reject);
    ws.on('open', () =>
      resolve({
        ws,
        exit,
        output: () => out,
        send: (t) => ws.send(Buffer.from(t), { binary: true }),
        resize: (cols, rows) => ws.send(JSON.stringify({ type: 'resize', cols, rows })),
        waitFor: (re, timeoutMs = 10_000) =>
          new Promise((res, rej) => {
            const timer = setTimeout(
              () => rej(new Error(`timed out waiting for ${re} in ${JSON.stringify(out.slice(-500))}`)),
              timeoutMs,
            );
            const check = () => {
              const m = re.exec(out);
              if (m) {
                clearTimeout(timer);
                res(m[0]);
              } else waiters.push(check);
            };
            check();
          }),
      }),
    );
  });
}
