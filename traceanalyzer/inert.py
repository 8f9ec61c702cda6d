"""Inert text: every string that comes from an input, made harmless for the place it is shown.

Names in traces, file names and paths are written by whoever made the input. Shown as they are,
they can notify people and link issues from a pull-request comment, clear the screen or set the
window title of a terminal, forge a second output line, or reorder what is displayed (bidi
overrides). One function per destination:

- `markdown`: GitHub-flavoured Markdown. One line; control, format (bidi, zero-width) and other
  invisible characters removed; cut to a length with an ellipsis. A word holding what GitHub acts
  on (@mentions, `#123` / `owner/repo#1` / `GH-1` / `JIRA-1` references, commit-like hex words, bare
  URLs, `www.` links, e-mail addresses, or the full-width and small compatibility forms of their
  characters, e.g. `＠`) is written as a code span, where GitHub links and mentions nothing; every
  other word has its Markdown and HTML punctuation backslash-escaped. Either way the rendered text
  is the input's, character for character, so a name copied from the comment is the trace's.
- `markdown_code`: the same inside a code span (GitHub links nothing there).
- `visible`: for HTML and as the last step for terminals. Every non-printable character
  (controls, bidi, zero-width, line separators) replaced by a visible escape such as `\\u202e`.
- `terminal`: escape sequences (CSI, OSC incl. hyperlinks and window titles, DCS, other ESC)
  removed whole, then `visible`, so a newline in a file name shows as `\\n` on the same line.
- `json_text`: JSON output with C1 controls, bidi, zero-width and separator characters written
  as `\\u` escapes (the JSON encoder already escapes C0), so the values read back unchanged but
  the bytes, printed with `-o -`, hold nothing a terminal would act on.
"""

from __future__ import annotations

import re
from typing import Any

ELLIPSIS = "…"

# Backslash-escaped in Markdown: everything that can start emphasis, code, links, HTML, tables,
# strikethrough or math. `#`, `@` and `:` are handled by the reference patterns below.
_MD_ESCAPE = {c: "\\" + c for c in "\\`*_[]<>|~&$"}

# What GitHub turns into links or notifications: a word holding one of these is written as a code span.
_MD_LINKY = re.compile(
    r"@"                                    # @user, @org/team, user@host, owner/repo@sha
    r"|#"                                   # #123, owner/repo#1, GH-style refs
    r"|(?<=[A-Za-z])-(?=\d)"                # GH-123 and a repository's own autolink prefixes (JIRA-12)
    r"|:(?=//)"                             # https://, ftp://, any scheme
    r"|(?i:www)(?=\.)"                      # www.example
    r"|\b[0-9A-Fa-f]{7,40}\b"               # commit SHAs (linked when they exist in the repository)
)

# Terminal escape sequences, 7-bit and 8-bit forms. OSC/DCS/PM/APC/SOS run to their terminator
# (BEL or ST) or, unterminated, to the end of the string.
_TERMINAL_SEQ = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"                                # CSI (colours, screen clear)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"  # OSC 8, titles, DCS
    r"|\x1b[ -/]*[0-~]"                                                # other ESC sequences
)

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"


def visible(text: object) -> str:
    """Every non-printable character (C0/C1 controls, bidi and zero-width marks, separators other
    than the space, lone surrogates) shown as a visible escape such as `\\x1b` or `\\u202e`."""
    s = str(text)
    if s.isprintable():  # the common case, at C speed
        return s
    return "".join(c if c.isprintable() else _escape_char(c) for c in s)


def terminal(text: object) -> str:
    """Text safe to print: escape sequences removed whole, tabs made spaces, everything else
    non-printable visible (so a newline cannot start a line of its own)."""
    s = str(text)
    if s.isprintable():
        return s
    return visible(_TERMINAL_SEQ.sub("", s).replace("\t", " "))


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def _plain_line(text: object, limit: int) -> str:
    """One line of printable characters: whitespace collapsed, terminal escape sequences and
    invisible characters dropped, cut."""
    s = " ".join(str(text).split())
    if not s.isprintable():
        s = "".join(c for c in _TERMINAL_SEQ.sub("", s) if c.isprintable())
    return shorten(s, limit)


# Compatibility forms of the characters mentions, references and URLs are made of (every character
# whose NFKC form is one of `@ # : / .`): read as that character when deciding whether a word is linky,
# so that no renderer that normalises text (NFKC) makes a mention or a link of `＠team` or `https：／／`.
_LOOKALIKES = str.maketrans({"\uff20": "@", "\ufe6b": "@", "\uff03": "#", "\ufe5f": "#", "\uff1a": ":",
                             "\ufe55": ":", "\ufe13": ":", "\uff0f": "/", "\uff0e": ".", "\ufe52": ".",
                             "\u2024": "."})


def _code_span(s: str) -> str:
    """`s` as a code span, its fence longer than any run of backticks inside it."""
    run = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or run else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _md_piece(s: str) -> str:
    if _MD_LINKY.search(s.translate(_LOOKALIKES)):
        lead, core, trail = _md_punctuation(s)
        if core and _MD_LINKY.search(core.translate(_LOOKALIKES)):
            return _md_plain(lead) + _code_span(core) + _md_plain(trail)
        return _code_span(s)
    return _md_plain(s)


def _md_plain(s: str) -> str:
    return "".join(_MD_ESCAPE.get(c, c) for c in s)


def _md_punctuation(s: str) -> tuple[str, str, str]:
    """A word's opening brackets and its closing commas, semicolons and unbalanced brackets, apart from
    its core: prose around a name stays prose ("(`a.b`)," rather than "`(a.b),`")."""
    start = len(s) - len(s.lstrip("(["))
    end = len(s)
    while end > start:
        c = s[end - 1]
        core = s[start:end - 1]
        if c in ",;" or (c == ")" and core.count("(") < core.count(")") + 1 and s[:start].count("(")) \
                or (c == "]" and core.count("[") < core.count("]") + 1 and s[:start].count("[")):
            end -= 1
            continue
        break
    return s[:start], s[start:end], s[end:]


def _md_word(word: str) -> str:
    """One word: a code span where GitHub would act on it, else backslash escapes. A pipe stays outside
    code spans (escaped), so the word is safe in a table cell, where a pipe would end the cell."""
    return "\\|".join(_md_piece(p) if p else "" for p in word.split("|"))


def markdown(text: object, limit: int = 160) -> str:
    """Inline-safe GitHub Markdown: one line, nothing that formats, links, mentions or hides, and
    rendered as the same characters as `text` (escapes and code spans, nothing inserted)."""
    return " ".join(_md_word(w) for w in _plain_line(text, limit).split(" "))


def markdown_code(text: object, limit: int = 160) -> str:
    """A code span holding `text` literally (GitHub links and mentions nothing inside code); not
    for table cells, where a pipe would end the cell."""
    s = _plain_line(text, limit)
    return _code_span(s) if s else "` `"


def visible_data(data: Any) -> Any:
    """`visible` applied to every string (keys too) in plain data for the page's scripts."""
    if isinstance(data, str):
        return visible(data)
    if isinstance(data, dict):
        return {visible(k) if isinstance(k, str) else k: visible_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        if data and not isinstance(data[0], (str, dict, list, tuple)):  # a numeric series: nothing to do
            if all(not isinstance(v, (str, dict, list, tuple)) for v in data):
                return data
        return [visible_data(v) for v in data]
    return data


# What a JSON encoder leaves raw but a terminal or an editor acts on: C1 controls, soft hyphen,
# bidi marks, zero-width and line/paragraph separators, invisible operators, BOM, tag characters.
_JSON_INVISIBLE = re.compile("[\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
                             "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def _json_escape(m: re.Match[str]) -> str:
    n = ord(m.group(0))
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000  # a UTF-16 surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}"


def json_text(data: bytes) -> bytes:
    """UTF-8 JSON with the characters above escaped (they only occur inside strings)."""
    text = data.decode("utf-8")
    if not _JSON_INVISIBLE.search(text):
        return data
    return _JSON_INVISIBLE.sub(_json_escape, text).encode("utf-8")
