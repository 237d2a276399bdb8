import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import { enc, session } from './api.js';
import { html } from './ui.js';

/**
 * An interactive shell in the VM: xterm.js over the daemon's shell WebSocket (binary frames are
 * terminal bytes both ways, a text frame `{type:"resize",cols,rows}` resizes). It fits its box
 * and follows the window's size. The session rides as a subprotocol (a page cannot set the upgrade's headers).
 */
export function TerminalView({ name }: { name: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [state, setState] = useState('connecting…');
  const [round, setRound] = useState(0);
  useEffect(() => {
    if (!box.current) return;
    const term = new Terminal({
      cursorBlink: true,
      fontSize: 14,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", monospace',
      scrollback: 5000,
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current);
    fit.fit();
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(
      `${proto}//${location.host}/vms/${enc(name)}/shell?cols=${term.cols}&rows=${term.rows}`,
      session.protocols(),
    );
    ws.binaryType = 'arraybuffer';
    const encoder = new TextEncoder();
    ws.onopen = () => {
      setState('connected');
      term.focus();
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') {
        try {
          const msg = JSON.parse(ev.data) as { type?: string; exit_code?: number };
          if (msg.type === 'exit') setState(`shell exited (${msg.exit_code})`);
        } catch {
          term.write(ev.data);
        }
        return;
      }
      term.write(new Uint8Array(ev.data as ArrayBuffer));
    };
    ws.onclose = (ev) =>
      setState((s) => (s.startsWith('shell exited') ? s : `closed${ev.reason ? `: ${ev.reason}` : ''}`));
    ws.onerror = () => setState('could not connect (is the VM running with its agent?)');
    const typed = term.onData((d) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(d));
    });
    const resized = term.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
    });
    const onWindow = () => fit.fit();
    window.addEventListener('resize', onWindow);
    return () => {
      window.removeEventListener('resize', onWindow);
      typed.dispose();
      resized.dispose();
      ws.close();
      term.dispose();
    };
  }, [name, round]);
  return html`<section class="card terminal-card">
    <div class="row"><span class="muted" data-test="terminal-state">${state}</span>
      <button type="button" onClick=${() => {
        setState('connecting…');
        setRound((r) => r + 1);
      }}>Reconnect</button></div>
    <div ref=${box} class="terminal" data-test="terminal"></div>
  </section>`;
}
