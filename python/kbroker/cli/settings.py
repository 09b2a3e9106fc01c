"""`kbroker settings` (every broker setting and its default) and `kbroker completion`."""

from __future__ import annotations

import json

import click

from kbroker.cli.common import json_option
from kbroker.config import BROKER


@click.command("settings")
@json_option
def list_settings(as_json: bool) -> None:
    """List every broker setting with its default; one not supported yet says so (a value
    given for it is refused at start)."""
    rows = [
        {
            "name": s.name,
            "type": s.type.name,
            "default": s.render(s.default),
            "doc": s.doc,
            "supported": s.supported,
            "unsupported_reason": s.unsupported,
            "honoured_values": [s.render(v) for v in s.honoured],
        }
        for s in BROKER.values()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    for row in rows:
        doc = row["doc"]
        if not row["supported"]:
            doc = f"{doc} [a value is refused: {row['unsupported_reason']}]"
        click.echo(f"{row['name']:<40} {row['type']:<8} {row['default']!s:<28} {doc}")


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script, e.g. `eval "$(kbroker completion bash)"` in
    ~/.bashrc (zsh: ~/.zshrc; fish: `kbroker completion fish | source`)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # every choice has a class
    root = click.get_current_context().find_root().command  # `kbroker` itself
    click.echo(cls(root, {}, "kbroker", "_KBROKER_COMPLETE").source())
