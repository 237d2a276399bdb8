import { pino, type Logger as Pino } from 'pino';
import type { Logger } from '../../ports/logger.js';

/** JSON lines to stderr (fd 2), as the spec asks of a daemon in the foreground. */
export class PinoLogger implements Logger {
  constructor(private readonly p: Pino) {}

  static create(level: string, name = 'svcd'): PinoLogger {
    return new PinoLogger(pino({ name, level, base: { pid: process.pid } }, pino.destination({ fd: 2, sync: false })));
  }

  debug(obj: object, msg?: string): void {
    this.p.debug(obj, msg);
  }

  info(obj: object, msg?: string): void {
    this.p.info(obj, msg);
  }

  warn(obj: object, msg?: string): void {
    this.p.warn(obj, msg);
  }

  error(obj: object, msg?: string): void {
    this.p.error(obj, msg);
  }

  child(bindings: object): Logger {
    return new PinoLogger(this.p.child(bindings));
  }

  flush(): void {
    this.p.flush();
  }
}
