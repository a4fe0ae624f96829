# bash completion for spark. Generated from the CLI by scripts/generate.py; do not edit.

_spark() {
  local cur="${COMP_WORDS[COMP_CWORD]}" cmd="${COMP_WORDS[1]}" path opts=""
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "ls pull rm run search show" -- "$cur")); return
  fi
  path="$cmd"
  case "$path" in
    "ls") opts="--quiet -q --help";;
    "pull") opts="--quant -q --copy --help";;
    "rm") opts="--yes -y --help";;
    "run") opts="--system --temperature --seed --max-tokens --verbose --help";;
    "search") opts="--limit -n --help";;
    "show") opts="--template --help";;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur")); return
  fi
  case "$path" in
    "rm"|"run"|"show") COMPREPLY=($(compgen -W "$(spark ls --quiet 2>/dev/null)" -- "$cur"));;
  esac
}
complete -o default -F _spark spark
