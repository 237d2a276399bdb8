import type { Command } from 'commander';

/** A command's first argument that names an existing VM: after it, completion offers `svc ls --names`. */
const VM_ARGUMENTS = new Set(['name', 'names', 'vm', 'template']);

/**
 * Shell completion scripts: command names, then VM names from `svc ls --names`. Both lists are
 * read from the program's own commands, so a command added to it is completed without more.
 */
export function completionScript(shell: string, program: Command): string {
  const words = (c: Command) => [c.name(), ...c.aliases()];
  const COMMANDS = program.commands.flatMap(words).join(' ');
  const VM_COMMANDS = program.commands
    .filter((c) => {
      const first = c.registeredArguments[0];
      return !!first?.required && VM_ARGUMENTS.has(first.name());
    })
    .flatMap(words)
    .join(' ');
  if (shell === 'bash') {
    return `# svc bash completion: eval "$(svc completion bash)"
_svc() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[1]}
  if [ "$COMP_CWORD" -eq 1 ]; then COMPREPLY=($(compgen -W "${COMMANDS}" -- "$cur")); return; fi
  case " ${VM_COMMANDS} " in *" $prev "*) [ "$COMP_CWORD" -eq 2 ] && COMPREPLY=($(compgen -W "$(svc ls --names 2>/dev/null)" -- "$cur"));; esac
}
complete -F _svc svc
`;
  }
  if (shell === 'zsh') {
    return `#compdef svc
# svc zsh completion: eval "$(svc completion zsh)"
_svc() {
  if (( CURRENT == 2 )); then compadd ${COMMANDS}; return; fi
  case " ${VM_COMMANDS} " in *" \${words[2]} "*) (( CURRENT == 3 )) && compadd $(svc ls --names 2>/dev/null);; esac
}
compdef _svc svc
`;
  }
  throw new Error(`completion: unknown shell "${shell}" (bash or zsh)`);
}
