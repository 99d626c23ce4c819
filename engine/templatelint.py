"""Templates are linted at load: no `{{ value }}` inside a Nix string, `''` string or comment.

Every `{{ value }}` prints a complete Nix expression (`to_nix`: a quoted, escaped string, a
number, a list ...). In code that is data. Inside a string literal it is not: `"prefix-{{ x }}"`
renders `"prefix-"x""`, and a value holding `" + builtins.readFile /etc/hostname + "` splices
code. Inside a comment, a value holding `*/` ends the comment. So a template may print values
only where Nix expects an expression (antiquotations `${ ... }` inside strings included), and the
linter refuses the rest with the line and the fix (bind the value in a `let`, then use `${x}`).

The linter follows Nix's lexer over the template's literal text (jinja2's own lexer separates it
from the tags): code, `"..."` strings with `\\` escapes, `''...''` strings with their `'''`,
`''$` and `''\\` escapes, `${ ... }` antiquotations (nested, braces counted), `#` and `/* */`
comments. Text of `{% if %}` branches is read in source order.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import InputError

CODE, DSTR, ISTR, LINE_COMMENT, BLOCK_COMMENT = "code", "string", "''-string", "comment", "comment"


class _NixLexer:
    """Just enough of Nix's lexer to know, at any point, whether we are in code."""

    def __init__(self) -> None:
        # a stack of contexts: ("code", brace depth) or a string/comment state
        self.stack: list[list[object]] = [[CODE, 0]]

    @property
    def state(self) -> str:
        return str(self.stack[-1][0])

    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            top = self.stack[-1]
            kind, c = top[0], text[i]
            two = text[i : i + 2]
            if kind == CODE:
                if c == '"':
                    self.stack.append([DSTR])
                elif two == "''":
                    self.stack.append([ISTR])
                    i += 1
                elif c == "#":
                    self.stack.append([LINE_COMMENT, "line"])
                elif two == "/*":
                    self.stack.append([BLOCK_COMMENT, "block"])
                    i += 1
                elif c == "{":
                    top[1] = int(str(top[1])) + 1
                elif c == "}":
                    if int(str(top[1])) == 0 and len(self.stack) > 1:
                        self.stack.pop()  # the end of a ${ ... } antiquotation
                    else:
                        top[1] = int(str(top[1])) - 1
            elif kind == DSTR:
                if c == "\\":
                    i += 1
                elif c == '"':
                    self.stack.pop()
                elif two == "$$":
                    i += 1
                elif two == "${":
                    self.stack.append([CODE, 0])
                    i += 1
            elif kind == ISTR:
                if text.startswith("'''", i):
                    i += 2
                elif two == "''" and text[i + 2 : i + 3] in ("$", "\\"):
                    i += 2 if text[i + 2] == "$" else 3
                elif two == "''":
                    self.stack.pop()
                    i += 1
                elif two == "$$":
                    i += 1
                elif two == "${":
                    self.stack.append([CODE, 0])
                    i += 1
            elif top[1] == "line":
                if c in "\n\r":
                    self.stack.pop()
            elif two == "*/":
                self.stack.pop()
                i += 1
            i += 1


def unsafe_interpolations(text: str) -> list[tuple[int, str]]:
    """(line, context) of every `{{ ... }}` that is not in Nix code."""
    from engine.render import environment

    lexer = _NixLexer()
    found: list[tuple[int, str]] = []
    for lineno, token, value in environment().lex(text):
        if token == "data":
            lexer.feed(value)
        elif token == "variable_begin" and lexer.state != CODE:
            found.append((lineno, lexer.state))
    return found


_LINTED: set[str] = set()


def lint_template(text: str, path: Path) -> None:
    """Refuse a template that prints a value inside a Nix string or comment (InputError)."""
    if text in _LINTED:
        return
    import jinja2

    try:
        bad = unsafe_interpolations(text)
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(
            f"template does not compile: {exc.message}",
            file=path,
            line=exc.lineno,
            hint="fix the jinja2 syntax at that line",
        ) from None
    if bad:
        line, where = bad[0]
        raise InputError(
            f"a {{{{ value }}}} inside a Nix {where}: the value would become part of the "
            "literal text, and a quote, ${ or */ in it would be Nix code",
            file=path,
            line=line,
            hint="print values only where Nix expects an expression: bind it first, "
            'e.g. `let x = {{ params.x }}; in "prefix-${x}"`, or concatenate: '
            '`"prefix-" + {{ params.x }}`',
        )
    _LINTED.add(text)
