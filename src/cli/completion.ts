/**
 * `sbx completion bash|zsh`: a completion script made from the command tree itself, so that it
 * stays true as commands change: command and subcommand names, each command's flags, and box
 * ids (from `sbx ls -q`, with the connection the user has) where a command takes one.
 */
import type { Command, Option } from 'commander';
import { Argument } from 'commander';

interface Node {
  /** `''` for the program, else the command path after it: `' images pull'`. */
  path: string;
  words: string[];
  /** Flags that take a value: the word after one is not a command. */
  valued: string[];
  boxIds: boolean;
}

function flags(options: readonly Option[]): string[] {
  return options.filter((o) => !o.hidden).flatMap((o) => [o.short, o.long].filter((f): f is string => !!f));
}

function nodes(cmd: Command, path: string, out: Node[]): Node[] {
  const subs = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
  const args = (cmd as unknown as { registeredArguments: readonly Argument[] }).registeredArguments ?? [];
  out.push({
    path,
    words: [...subs.flatMap((c) => [c.name(), ...c.aliases()]), ...flags(cmd.options), '--help'],
    valued: cmd.options.filter((o) => o.required || o.optional).flatMap((o) => [o.short, o.long].filter((f): f is string => !!f)),
    // A box id first: `<id>` or `<ids...>` of a command that is not about workspaces or keys.
    boxIds: /^ids?$/.test(args[0]?.name() ?? '') && !/ (ws|keys|workspace)\b/.test(path),
  });
  for (const c of subs) for (const name of [c.name(), ...c.aliases()]) nodes(c, `${path} ${name}`, out);
  return out;
}

export function completionScript(program: Command, shell: 'bash' | 'zsh'): string {
  const name = program.name();
  const fn = `_${name.replace(/[^A-Za-z0-9_]/g, '_')}_complete`;
  const all = nodes(program, '', []);
  const known = all.map((n) => `"${n.path}"`).join(' ');
  const cases = all.map((n) => `    "${n.path}") words="${n.words.join(' ')}" valued="${n.valued.join(' ')}" ids=${n.boxIds ? 1 : 0} ;;`).join('\n');
  const bash = `# ${name} completion for ${shell}; made by \`${name} completion ${shell}\`.
${fn}_node() {
  case "$1" in
${cases}
  esac
}
${fn}() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path="" words="" valued="" ids=0 i w k found skip=0 args=0
  local known=(${known})
  ${fn}_node ""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    if ((skip)); then skip=0; continue; fi
    case "$w" in
      -*) case " $valued " in *" $w "*) skip=1 ;; esac ;;
      *)
        found=0
        for k in "\${known[@]}"; do [[ "$k" == "$path $w" ]] && found=1 && break; done
        if ((found)); then path="$path $w"; ${fn}_node "$path"; else args=$((args + 1)); fi ;;
    esac
  done
  # The value of a flag: files, as a shell would.
  if ((skip)); then COMPREPLY=($(compgen -f -- "$cur")); return; fi
  if [[ "$cur" != -* && $ids -eq 1 && $args -eq 0 ]]; then
    COMPREPLY=($(compgen -W "$("\${COMP_WORDS[0]}" ls -q 2>/dev/null)" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
`;
  if (shell === 'bash') return `${bash}complete -o default -F ${fn} ${name}\n`;
  // zsh runs bash completion functions through bashcompinit.
  return `${bash}autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -F ${fn} ${name}\n`;
}

export function completionCommand(program: Command): void {
  program
    .command('completion')
    .description('Print a shell completion script for commands, flags and box ids')
    .addArgument(new Argument('<shell>', 'bash or zsh').choices(['bash', 'zsh']))
    .addHelpText(
      'after',
      `
Examples:
  source <(sbx completion bash)                      # this shell
  sbx completion bash > ~/.local/share/bash-completion/completions/sbx
  sbx completion zsh > "\${fpath[1]}/_sbx"            # or: source <(sbx completion zsh) in ~/.zshrc`,
    )
    .action((shell: 'bash' | 'zsh') => {
      process.stdout.write(completionScript(program, shell));
    });
}
