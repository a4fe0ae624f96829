# bash completion for spark. Generated from the CLI by scripts/generate.py; do not edit.

_spark() {
  local cur="${COMP_WORDS[COMP_CWORD]}" cmd="${COMP_WORDS[1]}" path opts=""
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "attach cp detach doctor keys log ls nodes ps pull rm run search serve show stop tui" -- "$cur")); return
  fi
  path="$cmd"
  case "$cmd" in
    keys)
      if [[ $COMP_CWORD -eq 2 ]]; then
        COMPREPLY=($(compgen -W "create list rename revoke" -- "$cur")); return
      fi
      path="$cmd ${COMP_WORDS[2]}";;
    nodes)
      if [[ $COMP_CWORD -eq 2 ]]; then
        COMPREPLY=($(compgen -W "add drain ls pull rm undrain" -- "$cur")); return
      fi
      path="$cmd ${COMP_WORDS[2]}";;
  esac
  case "$path" in
    "attach") opts="--scale --copy --help";;
    "cp") opts="--help";;
    "detach") opts="--projector --help";;
    "doctor") opts="--json --self-test --no-self-test --help";;
    "keys create") opts="--zero-retention --help";;
    "keys list") opts="--help";;
    "keys rename") opts="--help";;
    "keys revoke") opts="--help";;
    "keys") opts="--help";;
    "log") opts="--model --key --status --since --limit -n --follow -f --help";;
    "ls") opts="--quiet -q --help";;
    "nodes add") opts="--help";;
    "nodes drain") opts="--help";;
    "nodes ls") opts="--help";;
    "nodes pull") opts="--quant -q --help";;
    "nodes rm") opts="--help";;
    "nodes undrain") opts="--help";;
    "nodes") opts="--help";;
    "ps") opts="--help";;
    "pull") opts="--quant -q --copy --help";;
    "rm") opts="--yes -y --help";;
    "run") opts="--system --temperature --seed --max-tokens --verbose --help";;
    "search") opts="--limit -n --help";;
    "serve") opts="--host --port --join --token --help";;
    "show") opts="--template --help";;
    "stop") opts="--help";;
    "tui") opts="--url --help";;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur")); return
  fi
  case "$path" in
    "attach"|"detach"|"rm"|"run"|"show"|"stop") COMPREPLY=($(compgen -W "$(spark ls --quiet 2>/dev/null)" -- "$cur"));;
  esac
}
complete -o default -F _spark spark
