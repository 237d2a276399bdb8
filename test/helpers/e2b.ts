import type { TestDaemon } from './daemon.js';

/** The E2B SDK's options that point it at a test daemon's E2B API (E2B_API_URL and E2B_SANDBOX_URL's). */
export function e2bOptions(d: TestDaemon): { apiUrl: string; sandboxUrl: string; apiKey: string | undefined } {
  return {
    apiUrl: `http://127.0.0.1:${d.tcp.port}/e2b`,
    sandboxUrl: `http://127.0.0.1:${d.tcp.port}/e2b/envd`,
    apiKey: d.tcp.token,
  };
}
