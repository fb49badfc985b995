"""A loopback stand-in for GitHub's REST API (issue comments of pull requests), for `xc comment` and the action's
test — never the real service.

It keeps comments in memory per pull request, pages its lists two comments at a time whatever the client asks for
(so three comments span two pages, with a Link: rel="next" header), checks the token, and records every request it
gets, so tests assert on what reached the server rather than on what the client says it did. Switches make it
misbehave as a hostile or broken server would: a next-page link of its choosing, a redirect, an error message of
its choosing, a compressed answer that decodes to far more than it sends, an answer sent a byte at a time.
"""
import json
import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from xc_core.review.github import DEFAULT_MARKER, GITHUB_COMMENT_LIMIT

TOKEN = "ghs_s3cret-t0ken-for-the-tests"
REPO = "octo/demo"
PR = 7

_LIST = re.compile(r"^/repos/([^/]+/[^/]+)/issues/(\d+)/comments$")
_ONE = re.compile(r"^/repos/([^/]+/[^/]+)/issues/comments/(\d+)$")


class FakeGitHub:
    """The state of the stand-in: comments per PR, switches for failures, and the requests it received."""

    def __init__(self):
        self.comments: dict[int, list[dict]] = {}
        self.requests: list[dict] = []
        self.page_size = 2
        self.next_id = 100
        self.deny_writes = False        # 403 "Resource not accessible by integration" on POST / PATCH
        self.deny_reads = False         # 404 on the list, as for a repository the token cannot see
        self.vanish_on_patch = False    # the comment is deleted just before the PATCH arrives: 404
        self.list_status = None         # answer the list with this status (and list_message) instead
        self.list_message = "Server Error: something broke\nsecond line"
        self.next_base = None           # where rel="next" links point (default: this server)
        self.next_url = None            # the rel="next" link exactly as given (any text, sent as UTF-8)
        self.redirect_to = None         # answer every request with 302 and this Location
        self.list_gzip = None           # answer the list with these bytes, sent as Content-Encoding: gzip
        self.drip = None                # ("head" | "body", seconds): send the list's answer a byte at a time
        self.token = TOKEN              # the token it accepts
        self.url = ""

    def add(self, pr: int, body: str, login: str = "someone") -> dict:
        self.next_id += 1
        comment = {"id": self.next_id, "body": body, "user": {"login": login},
                   "html_url": f"https://github.com/{REPO}/pull/{pr}#issuecomment-{self.next_id}"}
        self.comments.setdefault(pr, []).append(comment)
        return comment

    def find(self, comment_id: int) -> dict | None:
        return next((c for cs in self.comments.values() for c in cs if c["id"] == comment_id), None)

    def methods(self) -> list[str]:
        return [r["method"] for r in self.requests]

    def ours(self, pr: int = PR, marker: str = DEFAULT_MARKER) -> list[dict]:
        return [c for c in self.comments.get(pr, []) if c["body"].startswith(marker + "\n")]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True      # headers and body go out in two writes: no 40 ms wait between them

    def log_message(self, *args):       # quiet
        pass

    @property
    def fake(self) -> FakeGitHub:
        return self.server.fake

    def _answer(self, status: int, payload, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _drip(self, where: str, seconds: float) -> None:
        """An empty list, sent a byte at a time: the status line and headers too (where "head"), or only the body
        (a hundred bytes of it)."""
        data = b"[" + b" " * 98 + b"]"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        if where == "body":
            self.wfile.write(head)
            head = b""
        try:
            for i in range(len(head + data)):
                time.sleep(seconds)
                self.wfile.write((head + data)[i:i + 1])
        except OSError:         # the client hung up
            self.close_connection = True

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.fake.requests.append({"method": self.command, "path": parts.path, "query": parse_qs(parts.query),
                                   "headers": dict(self.headers), "json": body})
        fake = self.fake
        if self.headers.get("Authorization") != f"Bearer {fake.token}":
            return self._answer(401, {"message": "Bad credentials"})
        if fake.redirect_to:
            return self._answer(302, {"message": "Moved"}, {"Location": fake.redirect_to})
        m_list, m_one = _LIST.match(parts.path), _ONE.match(parts.path)
        if m_list and m_list.group(1) != REPO or m_one and m_one.group(1) != REPO:
            return self._answer(404, {"message": "Not Found"})
        if self.command == "GET" and m_list:
            if fake.list_status:
                return self._answer(fake.list_status, {"message": fake.list_message})
            if fake.drip:
                return self._drip(*fake.drip)
            if fake.list_gzip is not None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(fake.list_gzip)))
                self.end_headers()
                try:
                    self.wfile.write(fake.list_gzip)
                except OSError:     # the client stopped reading and hung up
                    self.close_connection = True
                return None
            if fake.deny_reads:
                return self._answer(404, {"message": "Not Found"})
            pr = int(m_list.group(2))
            page = int(parse_qs(parts.query).get("page", ["1"])[0])
            everything = fake.comments.get(pr, [])
            start = (page - 1) * fake.page_size
            headers = {}
            if start + fake.page_size < len(everything):
                base = fake.next_base or fake.url
                following = fake.next_url or f"{base}{parts.path}?per_page=100&page={page + 1}"
                # http.server writes headers as latin-1: this sends the link's UTF-8 bytes, as a server would
                headers["Link"] = (f'<{following.encode().decode("latin-1")}>; rel="next", '
                                   f'<{base}{parts.path}?per_page=100&page=9>; rel="last"')
            return self._answer(200, everything[start:start + fake.page_size], headers)
        if self.command in ("POST", "PATCH") and fake.deny_writes:
            return self._answer(403, {"message": "Resource not accessible by integration",
                                      "documentation_url": "https://docs.github.com/rest"})
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return self._answer(422, {"message": "Invalid request: body is missing"})
        if len(body["body"]) > GITHUB_COMMENT_LIMIT:
            return self._answer(422, {"message": "Validation Failed: body is too long (maximum is 65536 characters)"})
        if self.command == "POST" and m_list:
            return self._answer(201, fake.add(int(m_list.group(2)), body["body"], login="github-actions[bot]"))
        if self.command == "PATCH" and m_one:
            comment = fake.find(int(m_one.group(2)))
            if fake.vanish_on_patch and comment:
                for cs in fake.comments.values():
                    if comment in cs:
                        cs.remove(comment)
                comment = None
            if comment is None:
                return self._answer(404, {"message": "Not Found"})
            comment["body"] = body["body"]
            return self._answer(200, comment)
        return self._answer(404, {"message": "Not Found"})

    do_GET = do_POST = do_PATCH = _handle


def _serve():
    fake = FakeGitHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.fake = fake
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


@contextmanager
def serving():
    """A running stand-in; yields its state (`.url`, `.comments`, `.requests`)."""
    server, thread = _serve()
    try:
        yield server.fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
