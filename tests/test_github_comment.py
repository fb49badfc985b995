"""xc's sticky pull-request comment against a loopback stand-in for the GitHub REST API (never the real service).

The stand-in (fake_github.py) records every request it gets, so the tests assert on what reached the server rather
than on what the client says it did.
"""
import os
import re
import socket
import tracemalloc
import zlib
from urllib.parse import quote

import pytest

from fake_github import PR, REPO, TOKEN, FakeGitHub, serving
from xc_core.review.github import (DEFAULT_MARKER, GITHUB_COMMENT_LIMIT, MAX_ANSWER_BYTES, MAX_EVENT_BYTES,
                                   CommentError, comment_body, post_sticky_comment)

VISION = "<!-- xc-report:vision -->"


@pytest.fixture
def github():
    with serving() as fake:
        yield fake


@pytest.fixture
def elsewhere():
    """A second stand-in on another port: another origin, which must never see the token."""
    with serving() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """The client uses its own session, which reads proxy variables: loopback requests must not go to a proxy."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def _env(fake: FakeGitHub, **override) -> dict:
    env = {"GITHUB_API_URL": fake.url + "/", "GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": TOKEN}
    env.update(override)
    return {k: v for k, v in env.items() if v is not None}


def _post(fake: FakeGitHub, markdown: str, **kwargs):
    kwargs.setdefault("env", _env(fake))
    return post_sticky_comment(markdown, kwargs.pop("pr", PR), timeout=5, **kwargs)


def _one_line_without_token(message: str) -> None:
    assert "\n" not in message and "\r" not in message
    assert TOKEN not in message


# --- create, update, find ---------------------------------------------------------------------------------------

def test_first_call_creates_second_updates_the_same_comment(github):
    alice = github.add(PR, "LGTM, but see the drift on coreml-ane")
    github.add(PR + 1, f"{DEFAULT_MARKER}\nanother PR's report")

    first = _post(github, "## xc report\n\nfirst run")
    assert first.action == "created" and not first.truncated
    assert isinstance(first.comment_id, int) and first.url.endswith(f"#issuecomment-{first.comment_id}")
    assert first.message == f"created comment {first.comment_id} on PR #{PR} ({REPO})"
    assert [c["id"] for c in github.ours()] == [first.comment_id]
    assert github.find(first.comment_id)["body"] == f"{DEFAULT_MARKER}\n## xc report\n\nfirst run"

    second = _post(github, "## xc report\n\nsecond run")
    assert second.action == "updated" and second.comment_id == first.comment_id
    assert second.message == f"updated comment {first.comment_id} on PR #{PR} ({REPO})"
    ours = github.ours()
    assert len(ours) == 1 and ours[0]["body"] == f"{DEFAULT_MARKER}\n## xc report\n\nsecond run"
    assert github.find(alice["id"])["body"] == "LGTM, but see the drift on coreml-ane"
    assert github.ours(PR + 1)[0]["body"] == f"{DEFAULT_MARKER}\nanother PR's report"   # another PR: untouched
    assert len(github.comments[PR]) == 2
    assert github.methods() == ["GET", "POST", "GET", "PATCH"]
    patch = github.requests[-1]
    assert patch["path"] == f"/repos/{REPO}/issues/comments/{first.comment_id}"

    for r in github.requests:
        h = {k.lower(): v for k, v in r["headers"].items()}
        assert h["authorization"] == f"Bearer {TOKEN}"
        assert h["accept"] == "application/vnd.github+json"
        assert h["x-github-api-version"] == "2022-11-28"
        assert re.fullmatch(r"xc/\d+\.\d+\.\d+\S*", h["user-agent"])
    assert github.requests[0]["query"]["per_page"] == ["100"]


def test_earlier_comment_on_page_two_is_found_and_patched(github):
    github.add(PR, "first!")
    github.add(PR, "a review comment")
    ours = github.add(PR, f"{DEFAULT_MARKER}\nold report", login="github-actions[bot]")
    github.add(PR, "a reply after the report")

    outcome = _post(github, "new report")
    assert outcome.action == "updated" and outcome.comment_id == ours["id"]
    assert github.methods() == ["GET", "GET", "PATCH"]          # page 1, page 2, then the edit; no POST
    assert github.requests[1]["query"]["page"] == ["2"]
    assert github.find(ours["id"])["body"] == f"{DEFAULT_MARKER}\nnew report"
    assert len(github.comments[PR]) == 4


def test_newest_of_several_marked_comments_is_updated(github):
    older = github.add(PR, f"{DEFAULT_MARKER}\nfrom an old xc")
    github.add(PR, "hello")
    newer = github.add(PR, f"intro someone wrote before it\r\n{DEFAULT_MARKER}\r\nhand-edited")  # marker on a line
    github.add(PR, f"> {DEFAULT_MARKER}\n> quoting it is not ours")

    outcome = _post(github, "latest")
    assert outcome.action == "updated" and outcome.comment_id == newer["id"]
    assert github.find(older["id"])["body"] == f"{DEFAULT_MARKER}\nfrom an old xc"


def test_two_markers_keep_two_comments_each_updated_in_place(github):
    a = _post(github, "report for the detector")
    b = _post(github, "report for the vision model", marker=VISION)
    assert a.action == b.action == "created" and a.comment_id != b.comment_id

    a2 = _post(github, "detector, second run")
    b2 = _post(github, "vision, second run", marker=f"  {VISION}  ")  # spaces around it are not part of it
    assert (a2.action, a2.comment_id) == ("updated", a.comment_id)
    assert (b2.action, b2.comment_id) == ("updated", b.comment_id)
    assert len(github.comments[PR]) == 2
    assert github.find(a.comment_id)["body"] == f"{DEFAULT_MARKER}\ndetector, second run"
    assert github.find(b.comment_id)["body"] == f"{VISION}\nvision, second run"
    assert github.methods().count("POST") == 2 and github.methods().count("PATCH") == 2


def test_comment_deleted_between_list_and_patch_is_posted_again(github):
    old = github.add(PR, f"{DEFAULT_MARKER}\nold")
    github.vanish_on_patch = True
    outcome = _post(github, "new")
    assert outcome.action == "created" and outcome.comment_id != old["id"]
    assert github.methods() == ["GET", "PATCH", "POST"]
    assert [c["body"] for c in github.comments[PR]] == [f"{DEFAULT_MARKER}\nnew"]


# --- a token that may not write -----------------------------------------------------------------------------------

@pytest.mark.parametrize("existing", [False, True], ids=["post", "patch"])
def test_403_on_write_is_a_warning_unless_strict(github, existing):
    if existing:
        mine = github.add(PR, f"{DEFAULT_MARKER}\nold")
    github.deny_writes = True

    outcome = _post(github, "report")
    assert outcome.action == "skipped" and outcome.url is None
    assert outcome.comment_id == (mine["id"] if existing else None)
    assert outcome.message.startswith("warning: could not write the comment on PR #7 (octo/demo) "
                                      "(HTTP 403: Resource not accessible by integration); a pull request from a fork")
    _one_line_without_token(outcome.message)
    assert github.methods() == ["GET", "PATCH" if existing else "POST"]

    with pytest.raises(CommentError) as e:
        _post(github, "report", strict=True)
    assert str(e.value).startswith("could not write the comment on PR #7 (octo/demo) (HTTP 403: Resource not "
                                   "accessible by integration)")
    _one_line_without_token(str(e.value))
    assert len(github.comments.get(PR, [])) == (1 if existing else 0)
    if existing:
        assert github.find(mine["id"])["body"] == f"{DEFAULT_MARKER}\nold"


def test_unreadable_comments_and_refused_token_are_skipped(github):
    github.deny_reads = True
    outcome = _post(github, "report")
    assert outcome.action == "skipped" and "could not read the comments of PR #7" in outcome.message
    assert "HTTP 404: Not Found" in outcome.message
    assert github.methods() == ["GET"]

    github.deny_reads = False
    refused = _post(github, "report", env=_env(github, GITHUB_TOKEN="ghs_wrong"))
    assert refused.action == "skipped" and "HTTP 401: Bad credentials" in refused.message
    assert "ghs_wrong" not in refused.message
    with pytest.raises(CommentError, match="HTTP 401"):
        _post(github, "report", env=_env(github, GITHUB_TOKEN="ghs_wrong"), strict=True)
    assert "POST" not in github.methods() and not github.comments.get(PR)


def test_other_error_status_is_a_comment_error_with_githubs_message(github):
    github.list_status = 500
    with pytest.raises(CommentError) as e:
        _post(github, "report")
    message = str(e.value)
    _one_line_without_token(message)
    assert message.startswith(f"GET /repos/{REPO}/issues/{PR}/comments: HTTP 500")
    assert "Server Error: something broke second line" in message


def test_unreachable_api_is_one_line():
    with socket.socket() as s:     # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"GITHUB_API_URL": f"http://127.0.0.1:{port}", "GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": TOKEN}
    with pytest.raises(CommentError) as e:
        post_sticky_comment("report", PR, env=env, timeout=2)
    assert str(e.value).startswith(f"cannot reach GITHUB_API_URL http://127.0.0.1:{port} (GET ")
    _one_line_without_token(str(e.value))


def test_next_link_to_another_origin_is_not_followed(github, elsewhere):
    for i in range(3):
        github.add(PR, f"comment {i}")
    github.next_base = elsewhere.url        # same host, another port: another origin
    with pytest.raises(CommentError) as e:
        _post(github, "report")
    message = str(e.value)
    _one_line_without_token(message)
    assert "next page is on another server" in message and elsewhere.url in message
    assert elsewhere.requests == []                       # the token never went there
    assert github.methods() == ["GET"]                    # and nothing was written
    assert len(github.comments[PR]) == 3


# --- a hostile or broken server: the token stays home, answers are bounded, its text is shown as text -----------

def _links_elsewhere(api: str, other: str) -> list[tuple[str, str]]:
    """(next-page link, the problem xc must name): each one sends the request, or could, to `other`."""
    a, o = api.split("//")[1], other.split("//")[1]        # host:port
    path = f"/repos/{REPO}/issues/{PR}/comments?per_page=100&page=2"
    return [
        (f"http://{o}\\@{a}{path}", "a backslash"),              # urllib.parse: api; urllib3: other
        (f"http://{a}\\\\@{o}{path}", "a backslash"),
        (f"http://{o}@{a}{path}", "user information"),           # goes to api, but who reads it which way?
        (f"http://{a}@{o}{path}", "user information"),
        (f"//{o}{path}", "the next page is on another server"),
        (f"http://{o}\t@{a}{path}", "whitespace or a control character"),
        (f"http://{o}\r\n\t@{a}{path}", "whitespace or a control character"),   # a folded header line
        (f"http://１２７.０.０.１:{o.split(':')[1]}{path}", "a non-ASCII character"),  # IDNA maps it to 127.0.0.1
    ]


@pytest.mark.parametrize("case", range(8))
def test_next_link_that_parsers_could_read_differently_is_refused(github, elsewhere, case):
    link, problem = _links_elsewhere(github.url, elsewhere.url)[case]
    for i in range(3):
        github.add(PR, f"comment {i}")
    github.next_url = link
    with pytest.raises(CommentError) as e:
        _post(github, "report")
    message = str(e.value)
    _one_line_without_token(message)
    assert problem in message and "the token is sent to GITHUB_API_URL only" in message
    assert elsewhere.requests == []                      # no request at all, with or without the token
    assert github.methods() == ["GET"] and len(github.comments[PR]) == 3


def test_redirect_is_not_followed(github, elsewhere):
    github.redirect_to = elsewhere.url + f"/repos/{REPO}/issues/{PR}/comments"
    with pytest.raises(CommentError, match="HTTP 302"):
        _post(github, "report")
    assert elsewhere.requests == [] and github.methods() == ["GET"]


def _gzip_of_spaces(size: int) -> bytes:
    """An empty JSON list padded with `size` spaces, gzipped: about a thousandth of its size."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    mib = b" " * (1024 * 1024)
    parts = [packer.compress(b"[")] + [packer.compress(mib) for _ in range(size // len(mib))]
    return b"".join(parts + [packer.compress(b"]"), packer.flush()])


def test_compressed_answer_that_decodes_past_the_bound_is_refused(github):
    github.list_gzip = _gzip_of_spaces(4 * MAX_ANSWER_BYTES)     # valid JSON: read whole, it would be accepted
    assert len(github.list_gzip) < MAX_ANSWER_BYTES // 100
    tracemalloc.start()
    try:
        with pytest.raises(CommentError) as e:
            _post(github, "report")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(e.value)
    _one_line_without_token(message)
    assert message == (f"GET /repos/{REPO}/issues/{PR}/comments: the answer from {github.url} is larger than "
                       f"{MAX_ANSWER_BYTES // 2**20} MiB once decoded; stopped reading it")
    assert peak < 2 * MAX_ANSWER_BYTES          # never the whole of it in memory
    assert github.methods() == ["GET"]


@pytest.mark.parametrize("where", ["head", "body"])
def test_answer_dripped_a_byte_at_a_time_ends_at_the_deadline(github, where):
    # Each byte comes well within the read timeout; the whole answer would take 17 s (head and body) or 10 s (body).
    github.drip = (where, 0.1)
    with pytest.raises(CommentError) as e:
        _post(github, "report", deadline=1.5)
    message = str(e.value)
    _one_line_without_token(message)
    assert message == (f"GET /repos/{REPO}/issues/{PR}/comments: no complete answer from {github.url} within "
                       "1.5 s; stopped waiting")
    assert github.methods() == ["GET"]


@pytest.mark.parametrize("at", [190, 194])
@pytest.mark.parametrize("echo", ["whole", "url-encoded", "first 12 characters"])
def test_token_in_an_error_message_is_masked_before_it_is_cut(github, echo, at):
    token = "ghp_Zq9/Kv+Wm=Rt&Yx%Lb-7Hd2Nf8Jc"          # characters that URL-encoding changes
    github.token = token
    shown = {"whole": token, "url-encoded": quote(token, safe=""), "first 12 characters": token[:12]}[echo]
    github.list_status = 500
    # The message is cut at 200 characters: cut first, the token would leave its first 5 to 9 characters behind.
    github.list_message = "." * at + shown + " and more"
    with pytest.raises(CommentError) as e:
        _post(github, "report", env=_env(github, GITHUB_TOKEN=token))
    message = str(e.value)
    assert "\n" not in message and "." * at + "***" in message
    for form in (token, quote(token, safe="")):
        assert not any(form[i:i + 4] in message for i in range(len(form) - 3)), message


def test_escape_sequences_from_the_server_are_shown_escaped(github, monkeypatch, capsys, tmp_path):
    from xc_core.cli import main
    github.list_status = 500
    github.list_message = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\x9b"
    with pytest.raises(CommentError) as e:
        _post(github, "report")
    assert str(e.value).endswith("HTTP 500 from " + github.url + r": \x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\x9b")

    for k, v in _env(github).items():
        monkeypatch.setenv(k, v)
    md = tmp_path / "report.md"
    md.write_text("report")
    assert main(["comment", str(md), "--pr", str(PR)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xc: GET ") and err.count("\n") == 1
    assert not any(ord(c) < 32 and c != "\n" or 127 <= ord(c) < 160 or c == "\u202e" for c in err), repr(err)


def _fifo(tmp_path) -> str:
    path = str(tmp_path / "event-pipe")
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make_event, problem", [
    (lambda tmp_path: "/dev/zero", "not a regular file (a character device)"),
    (_fifo, "not a regular file (a named pipe)"),
    (lambda tmp_path: str(tmp_path), "not a regular file (a folder)"),
    (lambda tmp_path: str(tmp_path / "missing.json"), "cannot read it (No such file or directory)"),
    (lambda tmp_path: _sparse(tmp_path, MAX_EVENT_BYTES + 1), f"larger than {MAX_EVENT_BYTES // 2**20} MiB"),
    (lambda tmp_path: _written(tmp_path, "{not json"), "not a JSON event"),
], ids=["dev-zero", "fifo", "folder", "missing", "too-large", "not-json"])
def test_event_file_that_is_not_a_small_regular_file_is_refused_in_one_line(github, monkeypatch, capsys, tmp_path,
                                                                               make_event, problem):
    from xc_core.cli import main
    for k, v in _env(github).items():
        monkeypatch.setenv(k, v)
    event = make_event(tmp_path)
    monkeypatch.setenv("GITHUB_EVENT_PATH", event)
    md = tmp_path / "report.md"
    md.write_text("report")
    assert main(["comment", str(md)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xc: comment: GITHUB_EVENT_PATH {event!r}: {problem}")
    assert err.endswith(" — give --pr N, or run in a GitHub Actions job triggered by a pull request\n")
    assert err.count("\n") == 1
    assert github.requests == []


def _sparse(tmp_path, size: int) -> str:
    path = tmp_path / "event.json"
    with open(path, "wb") as f:
        f.truncate(size)            # a hole: no disk used
    return str(path)


def _written(tmp_path, text: str) -> str:
    path = tmp_path / "event.json"
    path.write_text(text)
    return str(path)


# --- the body and its cut -----------------------------------------------------------------------------------------

def _note_count(body: str) -> int:
    m = re.search(r"\n\n… cut: ([\d,]+) characters of the report did not fit in a GitHub comment \(65,536 max\); "
                  r"the whole report is in the job's artifact and step summary\.$", body)
    assert m, body[-300:]
    return int(m.group(1).replace(",", ""))


def test_body_that_fits_is_marker_then_markdown():
    room = GITHUB_COMMENT_LIMIT - len(DEFAULT_MARKER) - 1
    body, cut = comment_body("x" * room)
    assert not cut and len(body) == GITHUB_COMMENT_LIMIT and body == f"{DEFAULT_MARKER}\n" + "x" * room
    body, cut = comment_body("x" * (room + 1))
    assert cut and len(body) <= GITHUB_COMMENT_LIMIT


def test_long_body_is_cut_at_a_line_with_a_note():
    lines = [f"| row {i} | {'é' * 40} |" for i in range(3000)]   # non-ASCII: the limit counts characters
    markdown = "\n".join(lines)
    assert len(markdown) > GITHUB_COMMENT_LIMIT
    body, cut = comment_body(markdown, VISION)
    assert cut and len(body) <= GITHUB_COMMENT_LIMIT
    assert body.startswith(VISION + "\n| row 0 |")
    head = body[len(VISION) + 1:body.index("\n\n… cut:")]
    assert markdown.startswith(head + "\n")                       # cut where a line ends
    assert _note_count(body) == len(markdown) - len(head)
    assert len(body) > GITHUB_COMMENT_LIMIT - 200                 # and not much shorter than it may be


def test_one_huge_line_is_cut_hard():
    body, cut = comment_body("y" * 200_000)
    assert cut and len(body) <= GITHUB_COMMENT_LIMIT and body.startswith(DEFAULT_MARKER + "\nyyy")
    head = body[len(DEFAULT_MARKER) + 1:body.index("\n\n… cut:")]
    assert set(head) == {"y"} and _note_count(body) == 200_000 - len(head)


def test_cut_inside_a_fence_closes_it():
    markdown = "## Layers\n\n<details><summary>all layers</summary>\n\n```text\n" + \
        "\n".join(f"layer_{i:05d} conv 3x3 drift 1e-3" for i in range(5000)) + "\n```\n\n</details>\n\nthe end"
    body, cut = comment_body(markdown)
    assert cut and len(body) <= GITHUB_COMMENT_LIMIT
    before_note = body[:body.index("\n\n… cut:")]
    assert before_note.endswith("drift 1e-3\n```\n</details>")
    assert sum(1 for line in body.splitlines() if line.startswith("```")) == 2
    assert body.count("<details>") == body.count("</details>") == 1
    assert "the end" not in body


def test_cut_after_a_closed_fence_adds_no_fence():
    markdown = "```\ncode\n```\n\n" + "\n".join(f"- item {i}" for i in range(20000))
    body, cut = comment_body(markdown)
    assert cut and len(body) <= GITHUB_COMMENT_LIMIT
    assert sum(1 for line in body.splitlines() if line.startswith("```")) == 2
    assert re.search(r"- item \d+\n\n… cut:", body)


def test_long_report_posted_fits_githubs_limit(github):
    outcome = _post(github, "\n".join(f"line {i} " + "z" * 60 for i in range(2000)))
    assert outcome.action == "created" and outcome.truncated
    assert "cut to fit GitHub's 65,536 characters" in outcome.message
    stored = github.find(outcome.comment_id)["body"]
    assert len(stored) <= GITHUB_COMMENT_LIMIT and stored.startswith(DEFAULT_MARKER + "\nline 0 ")
    assert "… cut:" in stored


# --- bad configuration: one line, and nothing sent ----------------------------------------------------------------

@pytest.mark.parametrize("override, expected", [
    ({"GITHUB_TOKEN": None}, "GITHUB_TOKEN is not set"),
    ({"GITHUB_TOKEN": "  "}, "GITHUB_TOKEN is not set"),
    ({"GITHUB_TOKEN": "ghs_a\nX-Evil: 1"}, "GITHUB_TOKEN: not accepted"),
    ({"GITHUB_REPOSITORY": None}, "GITHUB_REPOSITORY is not set — give the repository as owner/name"),
    ({"GITHUB_REPOSITORY": "demo"}, "GITHUB_REPOSITORY 'demo': not accepted — give the repository as owner/name"),
    ({"GITHUB_REPOSITORY": "octo/demo/issues"}, "owner/name"),
    ({"GITHUB_REPOSITORY": "octo/.."}, "owner/name"),
    ({"GITHUB_REPOSITORY": "../demo"}, "owner/name"),
    ({"GITHUB_REPOSITORY": "octo/demo?x=1"}, "owner/name"),
    ({"GITHUB_API_URL": "ftp://example.com"}, "GITHUB_API_URL 'ftp://example.com': not accepted"),
])
def test_bad_environment_is_one_line_and_sends_nothing(github, override, expected):
    with pytest.raises(CommentError) as e:
        _post(github, "report", env=_env(github, **override))
    assert expected in str(e.value)
    _one_line_without_token(str(e.value))
    assert "ghs_a" not in str(e.value)
    assert github.requests == []


@pytest.mark.parametrize("marker", ["xc-report", "<!-- a\nb -->", "<!-- a --> b -->", "<!-- open",
                                    "<!-- x --> trailing", "<!-->", "<!-- " + "m" * 300 + " -->"])
def test_bad_marker_is_one_line_and_sends_nothing(github, marker):
    with pytest.raises(CommentError) as e:
        _post(github, "report", marker=marker)
    assert "give one HTML comment on one line" in str(e.value)
    _one_line_without_token(str(e.value))
    with pytest.raises(CommentError):
        comment_body("report", marker)
    assert github.requests == []


def test_whitespace_around_a_marker_is_not_part_of_it():
    assert comment_body("r", " <!-- xc -->\n") == ("<!-- xc -->\nr", False)


@pytest.mark.parametrize("pr", [0, -3, True, "7", 7.0, None])
def test_bad_pr_number(github, pr):
    with pytest.raises(CommentError, match="positive integer"):
        _post(github, "report", pr=pr)
    assert github.requests == []
