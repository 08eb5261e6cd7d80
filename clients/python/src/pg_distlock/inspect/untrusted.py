"""Text that other sessions chose (an owner is any string a connection
sets), made safe to show: control and other non-printing characters are
written as Python escapes (a newline as \\n, an escape as \\x1b), so a name
can neither break a line nor send a terminal sequence; a backslash is
doubled, so that no two names read alike."""

from __future__ import annotations


def printable(text: str) -> str:
    return "".join(c if c.isprintable() and c != "\\" else c.encode("unicode_escape").decode("ascii") for c in text)
