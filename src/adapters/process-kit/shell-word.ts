/** `s` as one word for a POSIX shell: single-quoted, with each `'` closed, escaped and reopened. */
export const shellWord = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;
