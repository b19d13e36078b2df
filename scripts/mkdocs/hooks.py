"""MkDocs hooks: pages made from the code at build time, so that they cannot drift from it.

- reference/cli.md: every command's help, from the Typer app itself (what `pterun ... --help` prints).
- reference/errors.md: its ``<!-- error-codes -->`` marker becomes the table of error classes and their
  ExecuTorch codes, read from pterun.errors and the classes derived from PteError elsewhere.
"""

from __future__ import annotations

from mkdocs.structure.files import File

CLI_PAGE = "reference/cli.md"
ERRORS_PAGE = "reference/errors.md"
ERRORS_MARKER = "<!-- error-codes -->"


def cli_reference() -> str:
    import typer.cli
    import typer.main

    from pterun.cli.main import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="pterun")
    body = typer.cli.get_docs_for_click(obj=command, ctx=ctx, name="pterun", title="Command line")
    # The list of commands shows each one's help cut at 45 characters: link each to its section instead.
    for name, sub in command.commands.items():
        summary = (sub.help or "").strip().splitlines()[0] if sub.help else ""
        listed = f"* `{name}`: {sub.get_short_help_str()}\n"
        body = body.replace(listed, f"* [`{name}`](#pterun-{name}): {summary}\n")  # as it was if Typer lists otherwise
    note = ("This page is generated from the command line itself when the site is built: it is what "
            "`pterun --help` and `pterun COMMAND --help` print.\n\n")
    title, _, rest = body.partition("\n\n")
    return f"{title}\n\n{note}{rest}"


def error_classes() -> list[type]:
    """Every public PteError subclass pterun defines, in the order of their codes."""
    import pterun.llm  # noqa: F401 - the public packages, so that the subclasses they define exist
    import pterun.memory  # noqa: F401
    from pterun.errors import PteError

    found, stack = [], list(PteError.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith("pterun.") and not cls.__name__.startswith("_"):
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: (int(c.code), c.__module__ != "pterun.errors", c.__name__))


def error_table() -> str:
    rows = ["| Exception | ExecuTorch code | Value | Also a |", "|---|---|---|---|"]
    for cls in error_classes():
        bases = [b.__name__ for b in cls.__mro__[1:] if b.__module__ == "builtins"
                 and b not in (RuntimeError, Exception, BaseException, object)]
        rows.append(f"| `{cls.__module__}.{cls.__name__}` | `{cls.code.name}` | `0x{int(cls.code):02x}` | "
                    f"{', '.join(f'`{b}`' for b in bases)} |")
    return "\n".join(rows)


def on_files(files, config):
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == ERRORS_PAGE:
        if ERRORS_MARKER not in markdown:
            raise ValueError(f"{ERRORS_PAGE} lost its {ERRORS_MARKER} marker: the table of error codes has no place")
        return markdown.replace(ERRORS_MARKER, error_table())
    return markdown
