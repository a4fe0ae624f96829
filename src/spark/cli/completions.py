"""Static shell completion scripts (bash, zsh, fish) generated from the Typer app.

The scripts list every command and option, so tab completion costs no Python
start-up; only model names are looked up live, with `spark ls --quiet`.
`scripts/generate.py` writes them to completions/, and a test fails when the
checked-in files no longer match the app.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

HEADER = "# {shell} completion for spark. Generated from the CLI by scripts/generate.py; do not edit.\n"


class _Command:
    def __init__(self, path: str, cmd: Any) -> None:
        self.path = path  # "pull" or "keys create"
        self.help = (cmd.get_short_help_str(limit=80) or "").replace("'", "")
        self.options: list[tuple[list[str], str, bool]] = []  # (flags, help, takes a value)
        self.takes_model = False
        for p in cmd.params:
            if p.param_type_name == "option":
                flags = list(p.opts + p.secondary_opts)
                self.options.append((flags, (p.help or "").replace("'", "").split("\n")[0], not p.is_flag))
            elif p.param_type_name == "argument" and p.name == "model":
                self.takes_model = True
        self.options.append((["--help"], "Show help and exit", False))

    @property
    def flags(self) -> list[str]:
        return [f for flags, _, _ in self.options for f in flags]


def _commands(app: typer.Typer) -> tuple[list[_Command], list[tuple[str, str]]]:
    """Leaf commands with their paths, and the top-level words with help texts."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    ctx = root.context_class(root)
    leaves: list[_Command] = []
    top: list[tuple[str, str]] = []
    for name in sorted(root.list_commands(ctx)):
        cmd = root.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        top.append((name, (cmd.get_short_help_str(limit=80) or "").replace("'", "")))
        if isinstance(cmd, TyperGroup):  # a command group such as `spark keys`
            sub_ctx = cmd.context_class(cmd)
            for sub in sorted(cmd.list_commands(sub_ctx)):
                sc = cmd.get_command(sub_ctx, sub)
                if sc is not None and not sc.hidden:
                    leaves.append(_Command(f"{name} {sub}", sc))
            leaves.append(_Command(name, cmd))
        else:
            leaves.append(_Command(name, cmd))
    return leaves, top


def _groups(leaves: list[_Command]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for c in leaves:
        if " " in c.path:
            group, sub = c.path.split(" ", 1)
            groups.setdefault(group, []).append(sub)
    return groups


def bash_script(app: typer.Typer) -> str:
    leaves, top = _commands(app)
    groups = _groups(leaves)
    lines = [
        HEADER.format(shell="bash"),
        "_spark() {",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" cmd="${COMP_WORDS[1]}" path opts=""',
        "  if [[ $COMP_CWORD -eq 1 ]]; then",
        f'    COMPREPLY=($(compgen -W "{" ".join(n for n, _ in top)}" -- "$cur")); return',
        "  fi",
        '  path="$cmd"',
    ]
    if groups:
        lines.append('  case "$cmd" in')
        for group, subs in groups.items():
            lines += [
                f"    {group})",
                "      if [[ $COMP_CWORD -eq 2 ]]; then",
                f'        COMPREPLY=($(compgen -W "{" ".join(subs)}" -- "$cur")); return',
                "      fi",
                '      path="$cmd ${COMP_WORDS[2]}";;',
            ]
        lines.append("  esac")
    lines.append('  case "$path" in')
    for c in leaves:
        lines.append(f'    "{c.path}") opts="{" ".join(c.flags)}";;')
    lines.append("  esac")
    lines += ['  if [[ "$cur" == -* ]]; then', '    COMPREPLY=($(compgen -W "$opts" -- "$cur")); return', "  fi"]
    model_paths = "|".join(f'"{c.path}"' for c in leaves if c.takes_model)
    if model_paths:
        lines += [
            '  case "$path" in',
            f'    {model_paths}) COMPREPLY=($(compgen -W "$(spark ls --quiet 2>/dev/null)" -- "$cur"));;',
            "  esac",
        ]
    lines += ["}", "complete -o default -F _spark spark", ""]
    return "\n".join(lines)


def zsh_script(app: typer.Typer) -> str:
    leaves, top = _commands(app)
    groups = _groups(leaves)
    lines = [
        "#compdef spark",
        HEADER.format(shell="zsh"),
        "_spark_models() {",
        "  local -a models",
        '  models=(${(f)"$(spark ls --quiet 2>/dev/null)"})',
        "  _describe 'model' models",
        "}",
        "",
        "_spark() {",
        "  local -a commands",
        "  commands=(",
    ]
    lines += [f"    '{n}:{h}'" for n, h in top]
    lines += [
        "  )",
        "  if (( CURRENT == 2 )); then _describe 'command' commands; return; fi",
        '  local path="${words[2]}"',
    ]
    if groups:
        lines.append('  case "${words[2]}" in')
        for group, subs in groups.items():
            lines += [
                f"    {group})",
                f"      if (( CURRENT == 3 )); then compadd {' '.join(subs)}; return; fi",
                '      path="${words[2]} ${words[3]}";;',
            ]
        lines.append("  esac")
    lines.append('  case "$path" in')
    for c in leaves:
        specs = []
        for flags, help_text, takes_value in c.options:
            for f in flags:
                specs.append(
                    f"'{f}[{help_text.replace('[', '(').replace(']', ')')}]{':value:' if takes_value else ''}'"
                )
        if c.takes_model:
            specs.append("'*:model:_spark_models'")
        else:
            specs.append("'*:file:_files'")
        lines.append(f'    "{c.path}") _arguments {" ".join(specs)};;')
    lines += ["  esac", "}", "", "compdef _spark spark", ""]
    return "\n".join(lines)


def fish_script(app: typer.Typer) -> str:
    leaves, top = _commands(app)
    groups = _groups(leaves)
    words = " ".join(n for n, _ in top)
    lines = [
        HEADER.format(shell="fish"),
        "complete -c spark -f",
        "function __spark_models; spark ls --quiet 2>/dev/null; end",
    ]
    for name, help_text in top:
        lines.append(f"complete -c spark -n 'not __fish_seen_subcommand_from {words}' -a {name} -d '{help_text}'")
    for group, subs in groups.items():
        cond = f"__fish_seen_subcommand_from {group}; and not __fish_seen_subcommand_from {' '.join(subs)}"
        for sub in subs:
            lines.append(f"complete -c spark -n '{cond}' -a {sub}")
    for c in leaves:
        parts = c.path.split(" ")
        cond = " ; and ".join(f"__fish_seen_subcommand_from {p}" for p in parts)
        for flags, help_text, takes_value in c.options:
            for f in flags:
                kind = f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}"
                lines.append(f"complete -c spark -n '{cond}' {kind}{' -r' if takes_value else ''} -d '{help_text}'")
        if c.takes_model:
            lines.append(f"complete -c spark -n '{cond}' -a '(__spark_models)'")
    return "\n".join(lines) + "\n"


SCRIPTS = {"spark.bash": bash_script, "_spark": zsh_script, "spark.fish": fish_script}
