# fish completion for spark. Generated from the CLI by scripts/generate.py; do not edit.

complete -c spark -f
function __spark_models; spark ls --quiet 2>/dev/null; end
complete -c spark -n 'not __fish_seen_subcommand_from ls pull rm search show' -a ls -d 'List installed models.'
complete -c spark -n 'not __fish_seen_subcommand_from ls pull rm search show' -a pull -d 'Download a GGUF model from Hugging Face (or add a local file) to the library.'
complete -c spark -n 'not __fish_seen_subcommand_from ls pull rm search show' -a rm -d 'Remove models from the library (deleting the files Spark downloaded or copied).'
complete -c spark -n 'not __fish_seen_subcommand_from ls pull rm search show' -a search -d 'Search Hugging Face for GGUF models, most downloaded first.'
complete -c spark -n 'not __fish_seen_subcommand_from ls pull rm search show' -a show -d 'Show a models metadata, files, projector and settings.'
complete -c spark -n '__fish_seen_subcommand_from ls' -l help -d 'Show help and exit'
complete -c spark -n '__fish_seen_subcommand_from pull' -l quant -r -d 'Quantization to pull from a repository, e.g. Q4_K_M or Q8_0.'
complete -c spark -n '__fish_seen_subcommand_from pull' -s q -r -d 'Quantization to pull from a repository, e.g. Q4_K_M or Q8_0.'
complete -c spark -n '__fish_seen_subcommand_from pull' -l copy -d 'For a local file: copy it into Sparks models folder instead of using it in place.'
complete -c spark -n '__fish_seen_subcommand_from pull' -l help -d 'Show help and exit'
complete -c spark -n '__fish_seen_subcommand_from rm' -l yes -d 'Do not ask for confirmation.'
complete -c spark -n '__fish_seen_subcommand_from rm' -s y -d 'Do not ask for confirmation.'
complete -c spark -n '__fish_seen_subcommand_from rm' -l help -d 'Show help and exit'
complete -c spark -n '__fish_seen_subcommand_from search' -l limit -r -d 'Most results to show.'
complete -c spark -n '__fish_seen_subcommand_from search' -s n -r -d 'Most results to show.'
complete -c spark -n '__fish_seen_subcommand_from search' -l help -d 'Show help and exit'
complete -c spark -n '__fish_seen_subcommand_from show' -l template -d 'Print the whole chat template.'
complete -c spark -n '__fish_seen_subcommand_from show' -l help -d 'Show help and exit'
complete -c spark -n '__fish_seen_subcommand_from show' -a '(__spark_models)'
