/** Shell completion scripts: command names, then VM names from `svc ls --names`. */
const COMMANDS =
  'ls new clone fork pool get rm start stop pause resume suspend restore x sh cp fs fwd secret egress stats metrics activity info logs completion';
const VM_COMMANDS = 'clone fork get rm start stop pause resume suspend restore x sh stats metrics logs';

export function completionScript(shell: string): string {
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
