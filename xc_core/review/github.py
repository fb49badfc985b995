"""One sticky pull-request comment through the GitHub REST API: created on the first call, edited in place after.

xc's comment is recognised by a hidden HTML comment (the marker) on its first line, so a later run finds it among
everyone else's comments and edits it instead of adding another. Different markers keep different comments (one per
model, say). Plain `requests`, no `gh` CLI: it runs in any CI image that can install xc.

A token that may not write (the read-only GITHUB_TOKEN of a pull request from a fork) is a warning, not a failure,
unless the caller is strict: the report is in the job's artifact and step summary either way.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests

from .. import __version__
from . import COMMENT_MARKER

DEFAULT_MARKER = COMMENT_MARKER
GITHUB_COMMENT_LIMIT = 65536    # GitHub refuses an issue comment body longer than this (in characters)
DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
MAX_PAGES = 100                 # 100 comments a page: 10,000 comments before we give up looking
MAX_MARKER_CHARS = 256
MAX_REASON_CHARS = 200

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
                        env: Mapping[str, str] | None = None, session: requests.Session | None = None,
                        timeout: float = 30.0) -> CommentOutcome:
    """Create xc's comment on pull request `pr`, or edit the one an earlier call made (found by `marker`).

    Configuration comes from `env` (default os.environ): GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_TOKEN, as set in
    a GitHub Actions job. A token that may not write gives action "skipped" and a warning, or CommentError if
    `strict`. Anything else that goes wrong raises CommentError with one line.
    """
    env = os.environ if env is None else env
    marker = check_marker(marker)
    if isinstance(pr, bool) or not isinstance(pr, int) or pr < 1:
        raise CommentError(f"pull request number {pr!r}: not accepted — give a positive integer")
    api = _api_url(env)
    repository = _repository(env)
    token = _token(env)
    body, truncated = comment_body(markdown, marker)

    client = _Client(api, token, session, timeout)
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


def _api_url(env: Mapping[str, str]) -> str:
    api = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).strip().rstrip("/")
    parts = urlsplit(api)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.query or parts.fragment:
        raise CommentError(f"GITHUB_API_URL {_one_line(api, 100)!r}: not accepted — give an http(s) URL such as "
                           f"{DEFAULT_API_URL} (or leave it unset)")
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


class _Bearer(requests.auth.AuthBase):
    """The token as an auth object rather than a plain header, so that requests never swaps in ~/.netrc
    credentials for it."""

    def __init__(self, token: str):
        self.token = token

    def __call__(self, r):
        r.headers["Authorization"] = f"Bearer {self.token}"
        return r


class _Client:
    """The few calls this needs. The token goes only to GITHUB_API_URL's origin: redirects are not followed and a
    pagination link elsewhere is refused."""

    def __init__(self, api: str, token: str, session: requests.Session | None, timeout: float):
        self.api = api
        self.origin = _origin(api)
        self.token = token
        self.own_session = session is None
        self.session = session or requests.Session()
        self.timeout = timeout
        self.auth = _Bearer(token)
        self.headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                        "User-Agent": f"xc/{__version__}"}

    def close(self) -> None:
        if self.own_session:
            self.session.close()

    def list_comments(self, url: str) -> list[dict] | _Denied:
        """Every comment on the issue, following rel="next" links page by page."""
        comments: list[dict] = []
        params: dict | None = {"per_page": 100}     # the next links carry their own query
        for _ in range(MAX_PAGES):
            r = self._send("GET", url, params=params)
            if r.status_code in _NO_ACCESS:
                return _Denied(r.status_code, self._reason(r))
            page = self._json(r, "GET")
            if not isinstance(page, list):
                raise CommentError(f"GET {self._path(url)}: unexpected answer from {self.api} (not a list of "
                                   "comments)")
            comments += [c for c in page if isinstance(c, dict) and isinstance(c.get("id"), int)]
            following = (r.links.get("next") or {}).get("url")
            if not following:
                return comments
            url, params = urljoin(r.url or url, following), None
            if _origin(url) != self.origin:
                raise CommentError(f"GET {self._path(r.url or '')}: the next page is on another server "
                                   f"({_one_line(self._scrub(_shown_origin(url)), 100)}), not {self.api}; "
                                   "stopped there, the token is sent to GITHUB_API_URL only")
        raise CommentError(f"GET {self._path(url)}: more than {MAX_PAGES} pages of comments; stopped looking")

    def write(self, method: str, url: str, body: str, missing_ok: bool = False) -> dict | _Denied | None:
        """POST or PATCH the body: the comment GitHub answers with, _Denied, or None for a 404 when `missing_ok`."""
        r = self._send(method, url, json={"body": body})
        if r.status_code == 404 and missing_ok:
            return None
        if r.status_code in _NO_ACCESS:
            return _Denied(r.status_code, self._reason(r))
        answer = self._json(r, method)
        if not isinstance(answer, dict):
            raise CommentError(f"{method} {self._path(url)}: unexpected answer from {self.api} (not a comment)")
        return answer

    def _send(self, method: str, url: str, **kwargs) -> requests.Response:
        try:
            return self.session.request(method, url, headers=self.headers, auth=self.auth, timeout=self.timeout,
                                        allow_redirects=False, **kwargs)
        except requests.RequestException as e:
            reason = self._scrub(_one_line(str(e) or e.__class__.__name__, MAX_REASON_CHARS))
            raise CommentError(f"cannot reach GITHUB_API_URL {self.api} ({method} {self._path(url)}): "
                               f"{reason}") from None

    def _json(self, r: requests.Response, method: str):
        """The JSON of a 2xx answer; CommentError naming the method, the status and GitHub's message otherwise."""
        if not 200 <= r.status_code < 300:
            raise CommentError(f"{method} {self._path(r.url or '')}: HTTP {r.status_code} from {self.api}: "
                               f"{self._reason(r)}")
        try:
            return r.json()
        except ValueError:
            raise CommentError(f"{method} {self._path(r.url or '')}: HTTP {r.status_code} from {self.api} but "
                               "the answer is not JSON") from None

    def _reason(self, r: requests.Response) -> str:
        """GitHub's `message` (its error payload), else the start of the text, else the status's reason: one line,
        at most 200 characters."""
        try:
            payload = r.json()
            message = payload.get("message") if isinstance(payload, dict) else None
        except ValueError:
            message = None
        if not isinstance(message, str) or not message.strip():
            message = (r.text or "").strip() or r.reason or "no message"
        return self._scrub(_one_line(message, MAX_REASON_CHARS))

    def _path(self, url: str) -> str:
        """The URL's path, shorter than the URL in a message and enough to say which call failed."""
        return urlsplit(url).path or url

    def _scrub(self, text: str) -> str:
        """No token in a message, even when a server or an exception echoes it."""
        return text.replace(self.token, "***") if len(self.token) >= 4 else text


def _origin(url: str) -> tuple[str, str, int] | None:
    """scheme, host, port: where a URL sends its request (and the token). None when it cannot be told."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port


def _shown_origin(url: str) -> str:
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "an unreadable URL"


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
