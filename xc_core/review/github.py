"""One sticky pull-request comment through the GitHub REST API: created on the first call, edited in place after.

xc's comment is recognised by a hidden HTML comment (the marker) on its first line, so a later run finds it among
everyone else's comments and edits it instead of adding another. Different markers keep different comments (one per
model, say). Plain `requests`, no `gh` CLI: it runs in any CI image that can install xc.

A token that may not write (the read-only GITHUB_TOKEN of a pull request from a fork) is a warning, not a failure,
unless the caller is strict: the report is in the job's artifact and step summary either way.

The token goes to GITHUB_API_URL's origin and nowhere else, whatever the server answers; every answer is bounded in
size and in time, and server text reaches the user as one line with the token masked and control characters escaped.
"""
from __future__ import annotations

import json
import os
import re
import socket
import stat
import threading
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, quote_plus, urljoin, urlsplit

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.exceptions
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from .. import __version__
from . import COMMENT_MARKER

DEFAULT_MARKER = COMMENT_MARKER
GITHUB_COMMENT_LIMIT = 65536    # GitHub refuses an issue comment body longer than this (in characters)
DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
MAX_PAGES = 100                 # 100 comments a page: 10,000 comments before we give up looking
MAX_MARKER_CHARS = 256
MAX_REASON_CHARS = 200
_MiB = 1024 * 1024
# One answer, decoded. A page of 100 comments at GitHub's 65,536-character limit, in multi-byte text with JSON's
# escapes, stays below it; a decompression bomb (a few MB that grow to gigabytes) stops here.
MAX_ANSWER_BYTES = 32 * _MiB
MAX_EVENT_BYTES = 16 * _MiB     # GITHUB_EVENT_PATH: Actions events are kilobytes; no regular event comes near this
READ_TIMEOUT_SECONDS = 30.0     # each wait for the server (connecting, each read)
REQUEST_DEADLINE_SECONDS = 60.0  # one request as a whole: connecting, sending, and reading the whole answer
MIN_SECRET_PIECE = 8            # this many characters of the token in a row are masked wherever they appear
_READ_PIECE = 64 * 1024

# owner/name as GitHub allows them, and nothing that could change the URL's path (/, .., ?, #, %).
_REPOSITORY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]{0,99})/([A-Za-z0-9._-]{1,100})$")
# One HTML comment on one line, with no "-->" before its end (that would end it early and show the rest).
_MARKER = re.compile(r"^<!--(?:(?!-->)[^\r\n])*-->$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_DETAILS_OPEN = re.compile(r"<details\b", re.I)
_DETAILS_CLOSE = re.compile(r"</details\s*>", re.I)
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Statuses that mean "this token may not do that": a fork's read-only token gets 403 ("Resource not accessible by
# integration"), and GitHub answers 404 rather than 403 where it will not reveal that a repository exists.
_NO_ACCESS = (401, 403, 404)
_FORK_HINT = ("a pull request from a fork gets a read-only token — the report is in the step summary and the "
              "artifact")


class CommentError(Exception):
    """The comment could not be posted; the message is one line, meant to be shown as is, without the token."""


@dataclass
class CommentOutcome:
    action: str             # "created" | "updated" | "skipped" (the token may not write, and not strict)
    comment_id: int | None
    url: str | None         # the comment's html_url when known
    truncated: bool
    message: str            # one line for the user: what was done, or the warning


# --- the body ---------------------------------------------------------------------------------------------------

def check_marker(marker: str) -> str:
    """The marker, stripped, if it is one HTML comment on one line; CommentError saying what is accepted if not."""
    m = marker.strip() if isinstance(marker, str) else marker
    if not isinstance(m, str) or not _MARKER.match(m) or len(m) > MAX_MARKER_CHARS:
        shown = _one_line(repr(marker), 80)
        raise CommentError(f"marker {shown}: not accepted — give one HTML comment on one line, e.g. "
                           f"'<!-- xc-report:vision -->' (no '-->' inside, at most {MAX_MARKER_CHARS} characters)")
    return m


def comment_body(markdown: str, marker: str = DEFAULT_MARKER) -> tuple[str, bool]:
    """The marker line first, then the markdown; cut to fit GITHUB_COMMENT_LIMIT characters with a closing note
    saying how many characters were cut and that the full report is in the job's artifact. Returns (body, truncated).
    """
    marker = check_marker(marker)
    prefix = marker + "\n"
    body = prefix + markdown
    if len(body) <= GITHUB_COMMENT_LIMIT:
        return body, False
    # Room for the markdown: the note is sized for the most characters it could report (all of them), so the real
    # note is never longer. Closing a fence or <details> costs a few more: shrink and cut again until it fits.
    keep = GITHUB_COMMENT_LIMIT - len(prefix) - len(_cut_note(len(markdown)))
    while True:
        head = _cut(markdown, max(keep, 0))
        body = prefix + head + _closing(head) + _cut_note(len(markdown) - len(head))
        if len(body) <= GITHUB_COMMENT_LIMIT or keep <= 0:
            return body, True
        keep = min(keep, len(head)) - (len(body) - GITHUB_COMMENT_LIMIT)


def _cut_note(cut: int) -> str:
    return (f"\n\n… cut: {cut:,} characters of the report did not fit in a GitHub comment "
            f"({GITHUB_COMMENT_LIMIT:,} max); the whole report is in the job's artifact and step summary.")


def _cut(text: str, keep: int) -> str:
    """At most `keep` characters of text, ending at a line boundary unless that would lose more than half."""
    head = text[:keep]
    newline = head.rfind("\n")
    if newline >= keep // 2:
        head = head[:newline]
    return head.rstrip("\r")


def _closing(head: str) -> str:
    """What closes a ``` / ~~~ fence and <details> sections left open at the end of head, so the cut note renders
    as text below them rather than inside a code block or a collapsed section."""
    fence, details = None, 0
    for line in head.split("\n"):
        m = _FENCE.match(line.rstrip("\r"))
        if fence is not None:
            # CommonMark: a closing fence is the same character, at least as long, with nothing after it.
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            continue
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):  # a ``` line with a ` after it is inline code
            fence = m.group(1)
            continue
        details = max(0, details + len(_DETAILS_OPEN.findall(line)) - len(_DETAILS_CLOSE.findall(line)))
    return (f"\n{fence}" if fence else "") + "\n</details>" * details


# --- posting ----------------------------------------------------------------------------------------------------

def post_sticky_comment(markdown: str, pr: int, *, marker: str = DEFAULT_MARKER, strict: bool = False,
                        env: Mapping[str, str] | None = None, timeout: float = READ_TIMEOUT_SECONDS,
                        deadline: float = REQUEST_DEADLINE_SECONDS) -> CommentOutcome:
    """Create xc's comment on pull request `pr`, or edit the one an earlier call made (found by `marker`).

    Configuration comes from `env` (default os.environ): GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_TOKEN, as set in
    a GitHub Actions job. A token that may not write gives action "skipped" and a warning, or CommentError if
    `strict`. Anything else that goes wrong raises CommentError with one line. `timeout` bounds each wait for the
    server; `deadline` bounds each request as a whole, from connecting to the last byte of the answer.
    """
    env = os.environ if env is None else env
    marker = check_marker(marker)
    if isinstance(pr, bool) or not isinstance(pr, int) or pr < 1:
        raise CommentError(f"pull request number {pr!r}: not accepted — give a positive integer")
    api = _api_url(env)
    repository = _repository(env)
    token = _token(env)
    body, truncated = comment_body(markdown, marker)

    client = _Client(api, token, timeout, deadline)
    where = f"PR #{pr} ({repository})"
    try:
        comments = client.list_comments(f"{api}/repos/{repository}/issues/{pr}/comments")
        if isinstance(comments, _Denied):
            return _skipped(comments, "read the comments of", where, None, truncated, strict)
        ours = [c for c in comments if _is_ours(c.get("body"), marker)]
        existing = max((c["id"] for c in ours), default=None)
        if existing is not None:
            answer = client.write("PATCH", f"{api}/repos/{repository}/issues/comments/{existing}", body,
                                  missing_ok=True)
            if answer is not None:      # None: deleted since we listed it; post a new one
                if isinstance(answer, _Denied):
                    return _skipped(answer, "write the comment on", where, existing, truncated, strict)
                return _done("updated", answer, where, truncated)
        answer = client.write("POST", f"{api}/repos/{repository}/issues/{pr}/comments", body)
        if isinstance(answer, _Denied):
            return _skipped(answer, "write the comment on", where, None, truncated, strict)
        return _done("created", answer, where, truncated)
    finally:
        client.close()


def pull_request_number(event_path: str) -> int | None:
    """The pull request a GitHub Actions event file (GITHUB_EVENT_PATH) is about, or None when the event is not a
    pull request's. CommentError with one line when the file is not a regular file, is larger than MAX_EVENT_BYTES,
    or cannot be read as JSON."""
    shown = f"GITHUB_EVENT_PATH {_one_line(repr(event_path), 120)}"
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer before we can tell it is not a file.
        fd = os.open(event_path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError) as e:
        raise CommentError(f"{shown}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CommentError(f"{shown}: not a regular file ({_file_kind(info.st_mode)})")
        if info.st_size > MAX_EVENT_BYTES:
            raise CommentError(f"{shown}: larger than {MAX_EVENT_BYTES // _MiB} MiB, more than any Actions event")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_EVENT_BYTES + 1)      # the file can grow after fstat: the read is bounded too
    except OSError as e:
        raise CommentError(f"{shown}: cannot read it ({e.strerror or e.__class__.__name__})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_EVENT_BYTES:
        raise CommentError(f"{shown}: larger than {MAX_EVENT_BYTES // _MiB} MiB, more than any Actions event")
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):
        raise CommentError(f"{shown}: not a JSON event") from None
    if not isinstance(event, dict):
        return None
    pull_request, issue = event.get("pull_request"), event.get("issue")
    number = pull_request.get("number") if isinstance(pull_request, dict) else None
    if number is None and isinstance(issue, dict) and issue.get("pull_request"):   # a comment on a PR
        number = issue.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return None
    return number


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def _api_url(env: Mapping[str, str]) -> str:
    api = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).strip().rstrip("/")
    parsed = _parse(api)
    if _url_problem(api) or _origin(api) is None or parsed.auth or parsed.query or parsed.fragment:
        raise CommentError(f"GITHUB_API_URL {_one_line(repr(api), 100)}: not accepted — give an http(s) URL such "
                           f"as {DEFAULT_API_URL} (or leave it unset)")
    return api


def _repository(env: Mapping[str, str]) -> str:
    repository = (env.get("GITHUB_REPOSITORY") or "").strip()
    m = _REPOSITORY.match(repository)
    if not m or m.group(2) in (".", ".."):
        shown = f"{_one_line(repr(repository), 80)}: not accepted" if repository else "is not set"
        raise CommentError(f"GITHUB_REPOSITORY {shown} — give the repository as owner/name (letters, digits, "
                           "'-', '_', and '.' in the name), as GitHub Actions sets it")
    return repository


def _token(env: Mapping[str, str]) -> str:
    token = (env.get("GITHUB_TOKEN") or "").strip()
    if not token:
        raise CommentError("GITHUB_TOKEN is not set — pass the job's token, e.g. "
                           "`env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`, with `permissions: pull-requests: write`")
    # Checked here, because requests' own error for a bad header value quotes the value (the token).
    if not all(33 <= ord(c) <= 126 for c in token):
        raise CommentError("GITHUB_TOKEN: not accepted — it contains spaces or characters that are not printable "
                           "ASCII")
    return token


def _is_ours(body: object, marker: str) -> bool:
    """The marker is the first line of every body xc writes; a body edited by hand (GitHub stores \\r\\n then) or
    with text put before it is still ours while the marker stands on a line of its own."""
    if not isinstance(body, str):
        return False
    return any(line.strip() == marker for line in body.splitlines())


def _done(action: str, comment: dict, where: str, truncated: bool) -> CommentOutcome:
    comment_id, url = comment.get("id"), comment.get("html_url")
    comment_id = comment_id if isinstance(comment_id, int) and not isinstance(comment_id, bool) else None
    url = url if isinstance(url, str) else None
    message = f"{action} comment {comment_id} on {where}"
    if truncated:
        message += f" (cut to fit GitHub's {GITHUB_COMMENT_LIMIT:,} characters)"
    return CommentOutcome(action, comment_id, url, truncated, message)


def _skipped(denied: _Denied, what: str, where: str, comment_id: int | None, truncated: bool,
             strict: bool) -> CommentOutcome:
    line = f"could not {what} {where} (HTTP {denied.status}: {denied.reason}); {_FORK_HINT}"
    if strict:
        raise CommentError(line)
    return CommentOutcome("skipped", comment_id, None, truncated, f"warning: {line}")


@dataclass
class _Denied:
    """The token may not do this (401/403/404): a warning unless strict."""
    status: int
    reason: str


@dataclass
class _Answer:
    """One answer of the API, read whole (and no larger than MAX_ANSWER_BYTES decoded)."""
    status: int
    reason: str             # the status line's reason phrase
    url: str                # the URL it answers
    link: str | None        # the Link header: the next page of a list
    body: bytes

    def json(self):
        return json.loads(self.body)


class _NoNetrc(requests.auth.AuthBase):
    """Adds nothing. Given as a request's auth so that requests does not look the host up in ~/.netrc; the bearer
    token is added by hand once the request's URL is checked."""

    def __call__(self, r):
        return r


class _Deadline:
    """Ends a request at a set time, however slowly its server answers.

    A read timeout starts again with every byte, so a server that sends its status line, headers or body a byte at a
    time holds a plain request for ever. A timer thread shuts down the client's sockets at the deadline instead,
    which ends whichever read is waiting. It holds a duplicate of each socket's descriptor: TLS wrapping detaches
    the original socket object, a duplicate still reaches the connection.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._watched: list[tuple[object, socket.socket]] = []     # (urllib3 connection, duplicate of its socket)
        self._timer: threading.Timer | None = None
        self._round = 0
        self.expired = False

    def watch(self, connection, sock: socket.socket) -> None:
        """Called from a new connection, in the requesting thread, once its socket is connected."""
        duplicate = sock.dup()
        with self._lock:
            self._watched.append((connection, duplicate))
            expired = self.expired
        if expired:
            _shut(duplicate)

    def start(self, seconds: float) -> None:
        self.stop()
        with self._lock:
            self._round += 1
            self.expired = False
            # urllib3 closed these connections (sock None) and the last answer is read: drop their duplicates,
            # which would otherwise keep the connection open.
            closed = [d for conn, d in self._watched if getattr(conn, "sock", None) is None]
            self._watched = [(c, d) for c, d in self._watched if getattr(c, "sock", None) is not None]
        for duplicate in closed:
            duplicate.close()
        self._timer = threading.Timer(seconds, self._expire, args=(self._round,))
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self.stop()
        with self._lock:
            watched, self._watched = self._watched, []
        for _, duplicate in watched:
            duplicate.close()

    def _expire(self, round_: int) -> None:
        with self._lock:
            if round_ != self._round:       # a timer of an earlier request that was cancelled too late
                return
            self.expired = True
            duplicates = [d for _, d in self._watched]
        for duplicate in duplicates:
            _shut(duplicate)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass        # already closed by the other side


class _DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections report their sockets to a _Deadline as they connect."""

    def __init__(self, deadline: _Deadline):
        def watched(connection_class):
            class Watched(connection_class):
                def _new_conn(self):
                    sock = super()._new_conn()
                    deadline.watch(self, sock)
                    return sock
            return Watched
        self._pool_classes = {
            # urllib3's names: they appear in its error messages
            "http": type("HTTPConnectionPool", (urllib3.HTTPConnectionPool,),
                         {"ConnectionCls": watched(urllib3.connection.HTTPConnection)}),
            "https": type("HTTPSConnectionPool", (urllib3.HTTPSConnectionPool,),
                          {"ConnectionCls": watched(urllib3.connection.HTTPSConnection)}),
        }
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pool_classes

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, urllib3.ProxyManager):   # an HTTP(S) proxy; a SOCKS one has its own connections
            manager.pool_classes_by_scheme = self._pool_classes
        return manager


class _Client:
    """The few calls this needs. The token goes only to GITHUB_API_URL's origin: every request's final URL is
    checked just before it is sent, redirects are not followed, and a malformed pagination link is refused. Every
    answer is bounded: MAX_ANSWER_BYTES decoded, `deadline` seconds."""

    def __init__(self, api: str, token: str, timeout: float, deadline: float):
        self.api = api
        self.origin = _origin(api)
        self.token = token
        # The token as sent in a URL or form, and every piece of it long enough to matter: masked in messages.
        self.secrets = {token, quote(token, safe=""), quote_plus(token, safe="")}
        self.timeout = timeout
        self.deadline_seconds = deadline
        self.deadline = _Deadline()
        self.session = requests.Session()
        adapter = _DeadlineAdapter(self.deadline)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                        "User-Agent": f"xc/{__version__}"}

    def close(self) -> None:
        self.session.close()
        self.deadline.close()

    def list_comments(self, url: str) -> list[dict] | _Denied:
        """Every comment on the issue, following rel="next" links page by page."""
        comments: list[dict] = []
        params: dict | None = {"per_page": 100}     # the next links carry their own query
        link_from = None
        for _ in range(MAX_PAGES):
            r = self._send("GET", url, params=params, link_from=link_from)
            if r.status in _NO_ACCESS:
                return _Denied(r.status, self._reason(r))
            page = self._json(r, "GET")
            if not isinstance(page, list):
                raise CommentError(f"GET {self._path(r.url)}: unexpected answer from {self.api} (not a list of "
                                   "comments)")
            comments += [c for c in page if isinstance(c, dict) and isinstance(c.get("id"), int)]
            following = (_next_link(r.link) or {}).get("url")
            if not following:
                return comments
            problem = _url_problem(following)
            if problem:
                raise CommentError(f"GET {self._path(r.url)}: the next-page link from {self.api} has {problem}; "
                                   "not followed, the token is sent to GITHUB_API_URL only")
            url, params, link_from = urljoin(r.url, following), None, r.url
        raise CommentError(f"GET {self._path(url)}: more than {MAX_PAGES} pages of comments; stopped looking")

    def write(self, method: str, url: str, body: str, missing_ok: bool = False) -> dict | _Denied | None:
        """POST or PATCH the body: the comment GitHub answers with, _Denied, or None for a 404 when `missing_ok`."""
        r = self._send(method, url, json_body={"body": body})
        if r.status == 404 and missing_ok:
            return None
        if r.status in _NO_ACCESS:
            return _Denied(r.status, self._reason(r))
        answer = self._json(r, method)
        if not isinstance(answer, dict):
            raise CommentError(f"{method} {self._path(url)}: unexpected answer from {self.api} (not a comment)")
        return answer

    def _send(self, method: str, url: str, *, params: dict | None = None, json_body: dict | None = None,
              link_from: str | None = None) -> _Answer:
        """One request and its whole answer. The URL is checked as requests prepared it, with the parsers that
        decide where it connects, right before it goes out; only then does it get the token."""
        what = f"{method} {self._path(url)}"
        try:
            prepared = self.session.prepare_request(requests.Request(
                method, url, params=params, json=json_body, headers=self.headers, auth=_NoNetrc()))
            settings = self.session.merge_environment_settings(prepared.url, {}, True, None, None)
        except (requests.RequestException, ValueError) as e:
            raise CommentError(f"{what}: not a URL xc can request ({self._shown(str(e), MAX_REASON_CHARS)})") \
                from None
        if _origin(prepared.url) != self.origin:
            asked = f"GET {self._path(link_from)}: the next page" if link_from else f"{what}: the request"
            raise CommentError(f"{asked} is on another server ({self._shown(_shown_origin(prepared.url), 100)}), "
                               f"not {self.api}; stopped there, the token is sent to GITHUB_API_URL only")
        prepared.headers["Authorization"] = f"Bearer {self.token}"
        wait = min(self.timeout, self.deadline_seconds)
        started = time.monotonic()
        self.deadline.start(self.deadline_seconds)
        try:
            response = self.session.send(prepared, allow_redirects=False, timeout=(wait, wait), **settings)
            try:
                answer = _Answer(response.status_code, response.reason or "", prepared.url,
                                 response.headers.get("Link"), self._read(response, what))
            finally:
                response.close()
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as e:
            # (a TLS handshake's timeout is a deadline of its own: it can end at the same moment)
            if self.deadline.expired or time.monotonic() - started >= self.deadline_seconds:
                raise self._too_slow(what) from None
            reason = self._shown(str(e) or e.__class__.__name__, MAX_REASON_CHARS)
            raise CommentError(f"cannot reach GITHUB_API_URL {self.api} ({what}): {reason}") from None
        finally:
            self.deadline.stop()
        if self.deadline.expired:       # the answer ended at the deadline's shutdown: it may be cut short
            raise self._too_slow(what)
        return answer

    def _read(self, response: requests.Response, what: str) -> bytes:
        """The body, decoded a piece at a time, so that a small compressed answer cannot grow past the bound."""
        encodings = [e.strip().lower() for e in (response.headers.get("Content-Encoding") or "").split(",")]
        unknown = [e for e in encodings if e and e != "identity" and e not in urllib3.HTTPResponse.CONTENT_DECODERS]
        if unknown:
            raise CommentError(f"{what}: the answer from {self.api} is encoded as "
                               f"{self._shown(', '.join(unknown), 60)!r}, which xc cannot decode")
        body = bytearray()
        for piece in response.raw.stream(_READ_PIECE, decode_content=True):
            body += piece
            if len(body) > MAX_ANSWER_BYTES:
                raise CommentError(f"{what}: the answer from {self.api} is larger than "
                                   f"{MAX_ANSWER_BYTES // _MiB} MiB once decoded; stopped reading it")
        return bytes(body)

    def _too_slow(self, what: str) -> CommentError:
        return CommentError(f"{what}: no complete answer from {self.api} within {self.deadline_seconds:g} s; "
                            "stopped waiting")

    def _json(self, r: _Answer, method: str):
        """The JSON of a 2xx answer; CommentError naming the method, the status and GitHub's message otherwise."""
        if not 200 <= r.status < 300:
            raise CommentError(f"{method} {self._path(r.url)}: HTTP {r.status} from {self.api}: {self._reason(r)}")
        try:
            return r.json()
        except (ValueError, RecursionError):
            raise CommentError(f"{method} {self._path(r.url)}: HTTP {r.status} from {self.api} but the answer is "
                               "not JSON") from None

    def _reason(self, r: _Answer) -> str:
        """GitHub's `message` (its error payload), else the start of the text, else the status's reason: one line,
        at most MAX_REASON_CHARS characters, no token, control characters escaped."""
        try:
            payload = r.json()
            message = payload.get("message") if isinstance(payload, dict) else None
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, str) or not message.strip():
            message = r.body.decode("utf-8", "replace").strip() or r.reason or "no message"
        return self._shown(message, MAX_REASON_CHARS)

    def _path(self, url: str | None) -> str:
        """The URL's path, shorter than the URL in a message and enough to say which call failed."""
        try:
            path = urlsplit(url or "").path or url or ""
        except ValueError:
            path = url or ""
        return _one_line(self._mask(path), 200)

    def _shown(self, text: str, limit: int) -> str:
        """Text from a server or an exception, fit to show: the token masked first (so no cut can leave a piece of
        it), then one line of at most `limit` characters, with control characters escaped."""
        return _one_line(self._mask(text), limit)

    def _mask(self, text: str) -> str:
        """`text` with the token, its URL-encoded forms and any run of MIN_SECRET_PIECE or more of their
        characters in a row replaced by ***."""
        spans = []
        for secret in self.secrets:
            size = min(len(secret), MIN_SECRET_PIECE)       # a token shorter than a piece: the whole of it
            for piece in {secret[i:i + size] for i in range(len(secret) - size + 1)}:
                at = text.find(piece)                       # str.find: fast even on a whole answer's text
                while at != -1:
                    spans.append((at, at + size))
                    at = text.find(piece, at + 1)
        if not spans:
            return text
        out, end = [], 0
        for start, stop in sorted(spans):
            if start > end:
                out += [text[end:start], "***"]
            elif not out:
                out.append("***")
            end = max(end, stop)
        out.append(text[end:])
        return "".join(out)


def _next_link(header: str | None) -> dict | None:
    if not header:
        return None
    links = requests.utils.parse_header_links(header)
    return next((link for link in links if link.get("rel") == "next"), None)


def _url_problem(url: str) -> str | None:
    """What makes a URL one that parsers may read differently (so that a check and the request could disagree on
    where it goes), or None. GitHub's own links never have any of these."""
    if "\\" in url:
        return "a backslash"
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        return "whitespace or a control character"
    if not url.isascii():       # a host in other scripts or widths is IDNA-mapped to another name when prepared
        return "a non-ASCII character"
    authority = re.match(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//([^/?#]*)", url)
    if authority and "@" in authority.group(1):
        return "user information ('@') before the host"
    return None


def _parse(url: str):
    try:
        return parse_url(url)
    except LocationParseError:
        return None


def _origin(url: str) -> tuple[str, str, int] | None:
    """scheme, host, port: where a request for `url` connects (and sends the token), or None when it cannot be
    told. urllib3 connects where parse_url says; requests picks the connection pool with urllib.parse: both must
    agree, or the URL has no single origin."""
    parts = _parse(url)
    try:
        split = urlsplit(url)
        split_port = split.port
    except ValueError:
        return None
    if parts is None or not parts.host:
        return None
    scheme = (parts.scheme or "").lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    host, port = parts.host.lower(), parts.port or _DEFAULT_PORTS[scheme]
    seen_by_requests = (split.scheme.lower(), split.hostname or "", split_port or _DEFAULT_PORTS[scheme])
    if seen_by_requests != (scheme, host.strip("[]"), port):
        return None
    return scheme, host, port


def _shown_origin(url: str) -> str:
    parts = _parse(url)
    if parts is None or not parts.host:
        return "an unreadable URL"
    return f"{parts.scheme}://{parts.host}" + (f":{parts.port}" if parts.port else "")


def _one_line(text: str, limit: int) -> str:
    """One line of at most `limit` characters: whitespace runs become one space, control and format characters
    (a terminal's escape sequences, bidirectional overrides) are shown escaped, never sent to the terminal."""
    text = " ".join(text.split())[:limit + 1]           # more than this is never shown
    text = "".join(_escaped(c) if unicodedata.category(c)[0] == "C" else c for c in text)
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _escaped(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
