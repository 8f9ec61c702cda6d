"""Hostile names stay inert in every output: Markdown, HTML, terminal, diff, and the CLI end to end.

A trace built here names its kernels and ops with mentions, issue references, URLs, HTML,
Markdown links, NUL, terminal escapes (screen clear, OSC 8 hyperlink, OSC 0 window title), a
bidi override and a newline, and its file name holds escapes and a newline too. The Markdown is
rendered by a GFM renderer (cmark-gfm with its autolink extension, as GitHub does) and must hold
no link, no mention or reference GitHub would act on and no invisible character; the terminal
text no escape or control character but the newline and no forged line; the HTML, in Chromium,
shows control and bidi characters as visible escapes and runs nothing.
"""

from __future__ import annotations

import html as htmllib
import io
import re
import subprocess
import sys
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options as CmarkOptions
from conftest import ROOT
from kineto_builder import KinetoTrace
from test_browser_report import browser as browser  # noqa: F401  (the fixture: a real Chromium)
from test_browser_report import open_report

import traceanalyzer as ta
from traceanalyzer import inert
from traceanalyzer.compare import compare
from traceanalyzer.progress import Progress
from traceanalyzer.report.diff import render_diff_html, render_diff_json, render_diff_markdown, render_diff_text
from traceanalyzer.report.html import page_data, render_html
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.text import render_text

# (name, as the rendered Markdown shows it: the name itself, less what no output shows (controls, escapes))
SHOWN = {
    "@org/team": "@org/team", "@user": "@user", "fix #123": "fix #123", "owner/repo#1": "owner/repo#1",
    "GH-42": "GH-42", "JIRA-77": "JIRA-77", "https://evil.example/x": "https://evil.example/x",
    "www.evil.example": "www.evil.example",
    "mail evil@example.com": "mail evil@example.com", "sha deadbeef1234": "sha deadbeef1234",
    "<script>window.__pwned=1</script>": "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=2">': '<img src=x onerror="window.__pwned=2">',
    "[x](javascript:window.__pwned=3)": "[x](javascript:window.__pwned=3)",
    "nul\x00byte": "nulbyte", "clear\x1b[2Jscreen": "clearscreen",
    "\x1b]8;;https://evil.example/\x1b\\hyper\x1b]8;;\x1b\\link": "hyperlink",
    "title\x1b]0;pwned title\x07set": "titleset", "bidi\u202eevil\u202c": "bidievil", "two\nlines": "two lines",
}
NAMES = list(SHOWN)
# A file name with escapes, a mention, a reference, a bidi override and a newline (all legal on Linux).
EVIL_FILE = "evil\x1b]0;pwned\x07\x1b[2J\n@user #1 \u202e.json"
FORGED = "@user #1"  # what a raw newline in the file name would start a line with

# What GitHub would turn into a notification or a link, searched in the rendered text.
GITHUB_ACTS_ON = {
    "mention": re.compile(r"@[A-Za-z0-9]"),
    "issue reference": re.compile(r"#\d"),
    "GH- or autolink-prefix reference": re.compile(r"[A-Za-z]-\d"),
    "URL": re.compile(r"(?i)\b(?:https?|ftp)://"),
    "www link": re.compile(r"(?i)\bwww\."),
    "commit SHA": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
}
OUR_TAGS = re.compile(r"</?(?:details|summary|sub|p|h\d|strong|em|code|table|thead|tbody|tr|th|td|ol|ul|li|"
                      r"blockquote|br|hr)\b")


def hostile_trace(path: Path, slow_us: int = 0) -> Path:
    """Four steps; each hostile name is a kernel and the host op that launched it; syncs between."""
    t = KinetoTrace()
    for s in range(4):
        base = s * (12_000 + slow_us)
        t.step(s + 1, base, 12_000 + slow_us).dataloader(base, 300 + slow_us)
        for j, name in enumerate(NAMES):
            at = base + 400 + slow_us + 600 * j
            t.launched(at, 10, at + 20, 200, name=name, op=name)
            t.runtime("cudaStreamSynchronize", at + 220, 300)
    return t.write(path)


def gfm(md: str) -> str:
    """GitHub-flavoured HTML of `md` (tables, autolinks, strikethrough; raw HTML passed through)."""
    return cmarkgfm.github_flavored_markdown_to_html(md, options=CmarkOptions.CMARK_OPT_UNSAFE)


def assert_markdown_inert(md: str) -> str:
    """The Markdown holds no invisible character and renders to no link, foreign tag, mention or
    reference outside code spans; returns the rendered text."""
    raw = sorted({f"U+{ord(c):04X}" for c in md if c != "\n" and not c.isprintable()})
    assert raw == [], f"control/format characters in the Markdown: {raw}"
    page = gfm(md)
    assert "<a " not in page and "href" not in page
    foreign = {m.group(0) for m in re.finditer(r"</?[A-Za-z][^\s>/]*", page)
               if not OUR_TAGS.match(m.group(0) + " ")}
    assert foreign == set(), f"tags from the input: {foreign}"
    outside_code = htmllib.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<code>.*?</code>", " ", page, flags=re.S)))
    for what, pattern in GITHUB_ACTS_ON.items():  # GitHub links and mentions nothing inside code spans
        m = pattern.search(outside_code)
        assert m is None, f"live {what}: {outside_code[max(m.start() - 30, 0):m.end() + 30]!r}"
    return rendered_text(page)


def rendered_text(page: str) -> str:
    """The text a reader sees (and copies) of rendered HTML: tags dropped, entities read."""
    return htmllib.unescape(re.sub(r"<[^>]+>", "", page))


def assert_terminal_inert(out: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in out if c != "\n" and not c.isprintable()})
    assert bad == [], f"escape/control characters on the terminal: {bad}"
    assert not any(line.startswith(FORGED) for line in out.splitlines()), "a file name forged a line"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    return hostile_trace(tmp_path_factory.mktemp("hostile") / EVIL_FILE)


@pytest.fixture(scope="module")
def analysis(hostile):
    return ta.analyze(hostile)


# ---- the functions themselves -------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("@user", "`@user`"),
    ("@org/team", "`@org/team`"),
    ("owner/repo#1", "`owner/repo#1`"),
    ("GH-12", "`GH-12`"),
    ("JIRA-7 sm_80-1", "`JIRA-7` sm\\_80-1"),
    ("https://x.example", "`https://x.example`"),
    ("WWW.x.example", "`WWW.x.example`"),
    ("a@b.example", "`a@b.example`"),
    ("deadbeef1234", "`deadbeef1234`"),
    ("x|@y|z", "x\\|`@y`\\|z"),
    ("`#1`", "`` `#1` ``"),
    ("<b>*x*</b> | `y` ~z~ $m$ [l](u) &amp;", r"\<b\>\*x\*\</b\> \| \`y\` \~z\~ \$m\$ \[l\](u) \&amp;"),
    ("a\x00b\u202ec\u2066d\u200be\u061cf\x1b[2Jg", "abcdefg"),
    ("one\ntwo\t three", "one two three"),
    ("x" * 10, "xxxxxxxx…"),
    # prose around a name stays prose: the brackets and the comma are not inside its code span
    ("(enumerate(DataLoader)#_Iter.__next__), 60%", "(`enumerate(DataLoader)#_Iter.__next__`), 60%"),
    ("[@user];", "\\[`@user`\\];"),
    ("f(@x)", "`f(@x)`"),
])
def test_markdown_breaks_what_github_acts_on(text, expected):
    md = inert.markdown(text, limit=9 if text == "x" * 10 else 160)
    assert md == expected
    if text != "x" * 10 and text.isprintable():  # rendered, alone and in a table cell: the input's characters
        assert rendered_text(gfm(md)).strip() == text
        cell = re.search(r"<td>(.*?)</td>", gfm(f"| h |\n|---|\n| {md} |\n"), re.S)
        assert cell is not None and rendered_text(cell.group(1)) == text


def test_markdown_code_span_holds_backticks_literally():
    assert inert.markdown_code("step_time:+5%") == "`step_time:+5%`"
    span = inert.markdown_code("a ``b`` @user")
    assert span == "``` a ``b`` @user ```"
    assert "<code>a ``b`` @user</code>" in gfm(span)


@pytest.mark.parametrize(("text", "expected"), [
    ("plain", "plain"),
    ("clear\x1b[2J\x1b[1;31mred\x1b[0m", "clearred"),
    ("\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("\x1b]0;title\x07after", "after"),
    ("\x1b]0;unterminated title", ""),
    ("\x9b2J8-bit\x9d0;t\x9cC1", "8-bitC1"),
    ("\x1bPdcs\x1b\\x\x1b7y\x1bcz", "xyz"),
    ("a\nb\rc\td", "a\\nb\\rc d"),
    ("nul\x00 bell\x07 del\x7f c1\x85", "nul\\x00 bell\\x07 del\\x7f c1\\x85"),
    ("bidi\u202eevil\u2066x\u200f\u061c", "bidi\\u202eevil\\u2066x\\u200f\\u061c"),
    ("lone \ud800 tag \U000e0041", "lone \\ud800 tag \\U000e0041"),
])
def test_terminal_removes_sequences_and_shows_the_rest(text, expected):
    assert inert.terminal(text) == expected


def test_visible_escapes_and_keeps_ordinary_text():
    assert inert.visible("kernel<T> ä 😀") == "kernel<T> ä 😀"
    assert inert.visible("a\u202eb\x1b[2J\n") == "a\\u202eb\\x1b[2J\\n"
    data = inert.visible_data({"x\u202e": ["a\x00", {"b": "\u2067"}], "n": [1.5, 2, None]})
    assert data == {"x\\u202e": ["a\\x00", {"b": "\\u2067"}], "n": [1.5, 2, None]}


def test_the_markdown_check_sees_what_github_links():
    """The GFM check is live: raw names would fail it."""
    for md in ("see https://evil.example/x", "hi @user", "fixes #12", "<img src=x>", "a\u202eb"):
        with pytest.raises(AssertionError):
            assert_markdown_inert(md)


# ---- every renderer on the hostile trace --------------------------------------------------------

def test_markdown_report_is_inert(analysis):
    md = render_markdown(analysis)
    text = assert_markdown_inert(md)
    assert sum(shown in text for shown in SHOWN.values()) >= 15  # the top kernels, shown, only made inert
    assert "pwned title" not in text  # a window title is removed with its sequence
    assert "evil @user #1 .json" in text  # the file name, on one line


def test_markdown_findings_quoting_names_are_inert(hostile):
    """Finding titles and evidence quote names (a diagnosis of the agreed shape, as report_fixtures makes)."""
    from report_fixtures import report_for

    for name, shown in SHOWN.items():
        text = assert_markdown_inert(render_markdown(report_for([hostile], diagnosed=True, evidence_name=name)))
        assert f"The GPU waits for {shown}" in text


def test_terminal_summary_is_inert(analysis):
    out = render_text(analysis)
    assert_terminal_inert(out)
    assert "evil\\n@user #1 \\u202e.json: window" in out  # the file name, escaped, on its own rank line


def test_html_shows_control_and_bidi_characters(analysis, hostile):
    from report_fixtures import report_for

    page = render_html(analysis)
    raw = sorted({f"U+{ord(c):04X}" for c in page if c != "\n" and not c.isprintable()})
    assert raw == []
    assert "<code>bidi\\u202eevil\\u202c</code>" in page
    assert "<code>clear\\x1b[2Jscreen</code>" in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\n@user #1 \\u202e.json" in page  # title, rank labels, inputs
    labels = [r["label"] for r in page_data(analysis)["ranks"]]
    assert labels == ["evil\\x1b]0;pwned\\x07\\x1b[2J\\n@user #1 \\u202e.json"]
    quoted = render_html(report_for([hostile], diagnosed=True, evidence_name="two\nlines\u2067"))
    assert "<h3>The GPU waits for two\\nlines\\u2067</h3>" in quoted


# What the page's own scripts read back: every string of the embedded data, and the page's text.
_PAGE_STRINGS = """() => {
  const out = [];
  const walk = (v) => { if (typeof v === "string") out.push(v);
    else if (v && typeof v === "object") for (const k in v) { out.push(k); walk(v[k]); } };
  walk(JSON.parse(document.getElementById("report-data").textContent));
  return out;
}"""


@pytest.mark.slow
def test_html_in_a_browser_shows_escapes_and_runs_nothing(browser, hostile, tmp_path):
    from report_fixtures import report_for

    analysis = report_for([hostile], diagnosed=True, evidence_name="<img src=x onerror=window.__pwned=4>\u202e")
    html_path = tmp_path / "hostile.html"
    html_path.write_text(render_html(analysis), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        page.wait_for_timeout(200)
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("document.scripts.length") == 2 and page.locator("img").count() == 0
        text = page.locator("body").inner_text()
        bad = sorted({f"U+{ord(c):04X}" for c in text if c not in "\n\t" and not c.isprintable()})
        assert bad == [], f"invisible characters drawn on the page: {bad}"
        for shown in ("bidi\\u202eevil\\u202c", "clear\\x1b[2Jscreen", "nul\\x00byte",
                      "evil\\x1b]0;pwned\\x07\\x1b[2J\\n@user #1 \\u202e.json",
                      "The GPU waits for <img src=x onerror=window.__pwned=4>\\u202e"):
            assert shown in text, shown
        names = page.locator("td.kname code").all_text_contents()
        assert "<script>window.__pwned=1</script>" in names and "bidi\\u202eevil\\u202c" in names
        strings = page.evaluate(_PAGE_STRINGS)
        assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\n@user #1 \\u202e.json" in strings  # the timeline's label
        assert not [v for v in strings if not all(c.isprintable() for c in v)]
        page.locator(".tl canvas").first.hover()  # the tooltip, drawn from that data, runs nothing either
        assert page.evaluate("window.__pwned") is None
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_json_escapes_invisible_characters_and_keeps_the_values(analysis):
    import orjson

    from traceanalyzer.report.jsonout import render_json

    data = render_json(analysis)
    text = data.decode("utf-8")
    assert not [c for c in text if c != "\n" and not c.isprintable()]
    assert "bidi\\u202eevil\\u202c" in text and "nul\\u0000byte" in text
    assert orjson.loads(data) == orjson.loads(orjson.dumps(analysis.to_data(), option=orjson.OPT_SERIALIZE_NUMPY))
    assert inert.json_text('"\u0085 \U000e0041"'.encode()) == b'"\\u0085 \\udb40\\udc41"'


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile_diff")
    base = hostile_trace(d / ("base " + EVIL_FILE))
    head = hostile_trace(d / ("head " + EVIL_FILE), slow_us=2_000)
    return compare(ta.analyze(base), ta.analyze(head), root=str(d))


def test_diff_outputs_are_inert(comparison):
    assert comparison.kernels  # the kernel movers quote the hostile names
    text = assert_markdown_inert(render_diff_markdown(comparison))
    assert "https://evil.example/x" in text and "owner/repo#1" in text
    out = render_diff_text(comparison)
    assert_terminal_inert(out)
    page = render_diff_html(comparison)
    assert not [c for c in page if c != "\n" and not c.isprintable()]
    assert not [c for c in render_diff_json(comparison).decode() if c != "\n" and not c.isprintable()]
    assert "<code>bidi\\u202eevil\\u202c</code>" in page and "<script" not in page


def test_progress_line_is_inert():
    stream = io.StringIO()
    stream.isatty = lambda: True  # type: ignore[method-assign]
    p = Progress([], stream=stream, min_bytes=0)
    p.stage("reading evil\x1b]0;t\x07\n\u202e")
    p.done()
    assert_terminal_inert(stream.getvalue().replace("\r", ""))
    assert "reading evil\\n\\u202e..." in stream.getvalue()


# ---- the command line, end to end ----------------------------------------------------------------

def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *args], cwd=cwd, capture_output=True,
                          text=True, errors="surrogateescape", timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_cli_on_the_hostile_trace(tmp_path):
    trace = hostile_trace(tmp_path / EVIL_FILE)
    before = trace.read_bytes()
    res = cli("report", trace.name, "-o", "r.md", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert_terminal_inert(res.stdout + res.stderr)
    assert "evil\\n@user #1 \\u202e.json" in res.stdout
    assert_markdown_inert((tmp_path / "r.md").read_text(encoding="utf-8"))
    res = cli("report", trace.name, cwd=tmp_path)  # default output name: the hostile file name, escaped
    assert res.returncode == 0, res.stderr
    assert_terminal_inert(res.stdout + res.stderr)
    assert "written to " in res.stdout and ".report.html" in res.stdout
    for fmt in ("json", "md", "html"):  # a report on standard output, the summary on stderr
        res = cli("report", trace.name, "--format", fmt, "-o", "-", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert_terminal_inert(res.stdout + res.stderr)
    head = hostile_trace(tmp_path / ("head " + EVIL_FILE), slow_us=2_000)
    res = cli("diff", trace.name, head.name, "-o", "d.md", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert_terminal_inert(res.stdout + res.stderr)
    assert_markdown_inert((tmp_path / "d.md").read_text(encoding="utf-8"))
    assert trace.read_bytes() == before


def test_cli_error_about_a_hostile_file_is_one_inert_line(tmp_path):
    bad = tmp_path / ("bad " + EVIL_FILE)
    bad.write_bytes(b"{\"traceEvents\": 12}")
    res = cli("report", bad.name, "-o", "r.md", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith("traceanalyzer: error: bad evil\\n@user #1 \\u202e.json: ")
    assert_terminal_inert(res.stderr)
    missing = cli("report", "gone\x1b]0;t\x07\n@user.json", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert_terminal_inert(missing.stderr)


@pytest.mark.slow
def test_cli_log_dir_messages_are_inert(tmp_path):
    """Run and file names of a log dir are printed on stderr (what was found and picked)."""
    run_dir = tmp_path / "logs" / f"run\x1b]0;t\x07\n{FORGED}\u202e"
    run_dir.mkdir(parents=True)
    for span in (1, 2):
        hostile_trace(run_dir / f"worker\x1b[2J\u202e.{span}.pt.trace.json")
    res = cli("report", "logs", "-o", "r.md", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"run\\n{FORGED}\\u202e" in res.stderr and "worker\\u202e.2.pt.trace.json" in res.stderr
    assert_terminal_inert(res.stdout + res.stderr)


def test_markdown_breaks_compatibility_forms_of_mentions_references_and_links():
    """Full-width and small forms (NFKC-equal to @ # : / .) make their word a code span, kept as written."""
    import unicodedata

    text = "\uff20everyone \ufe6bteam \uff03123 \ufe5f7 https\uff1a\uff0f\uff0fevil\uff0eio www\uff0eexample"
    md = inert.markdown(text)
    assert md == " ".join(f"`{w}`" for w in text.split())
    page = gfm(md)
    assert rendered_text(page).strip() == text
    assert "@everyone" not in unicodedata.normalize("NFKC", re.sub(r"<code>.*?</code>", "", page))
