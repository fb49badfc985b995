"""A small OpenID Connect provider on loopback, for the dashboard's sign-in tests (never a real identity provider).

It speaks the protocol Streamlit's st.login (Authlib's Starlette client) speaks, and checks what a real provider
checks: a discovery document; an authorization endpoint that takes the authorization-code request (client id, the
registered redirect URI, scope openid, state, nonce, a PKCE S256 challenge) and signs in one fixed test user when its
button is pressed; a token endpoint that authenticates the client (HTTP Basic or form), takes each code once, checks
the redirect URI and the PKCE verifier, and issues an RS256-signed id_token; the JWKS with the public key. Keys and
JWTs are joserfc's (the JOSE library Authlib itself uses). It never prints or stores the client secret.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from joserfc import jwt
from joserfc.jwk import RSAKey


class OidcProvider:
    """`with OidcProvider(client_id, client_secret, redirect_uri, user) as p:` serves on 127.0.0.1 until the block
    ends; `p.metadata_url` is what [auth] server_metadata_url names. `p.calls` counts the requests per endpoint."""

    def __init__(self, client_id: str, client_secret: str, redirect_uri: str, user: dict):
        self.client_id, self._client_secret, self.redirect_uri = client_id, client_secret, redirect_uri
        self.user = dict(user)      # the fixed test user's claims: sub, email, name
        self._key = RSAKey.generate_key(2048, parameters={"kid": "xc-test-key", "use": "sig", "alg": "RS256"})
        self._pending: dict[str, dict] = {}     # authorization requests waiting for the user's click
        self._codes: dict[str, dict] = {}       # codes issued and not yet exchanged
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.metadata_url = f"{self.issuer}/.well-known/openid-configuration"

    def __enter__(self) -> "OidcProvider":
        threading.Thread(target=self._server.serve_forever, name="oidc-provider", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the endpoints ----------------------------------------------------------------------------------------
    def _metadata(self) -> dict:
        return {"issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"], "scopes_supported": ["openid", "email", "profile"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                "code_challenge_methods_supported": ["S256"], "grant_types_supported": ["authorization_code"]}

    def _authorize(self, q: dict) -> tuple[int, dict, str]:
        """The authorization request: checked, then a page with one button that signs the test user in."""
        checks = [(q.get("response_type") == "code", "response_type must be code"),
                  (q.get("client_id") == self.client_id, "unknown client_id"),
                  (q.get("redirect_uri") == self.redirect_uri, "redirect_uri is not the registered one"),
                  ("openid" in (q.get("scope") or "").split(), "scope must include openid"),
                  (bool(q.get("state")), "state is missing"),
                  (bool(q.get("nonce")), "nonce is missing"),
                  (q.get("code_challenge_method") == "S256" and bool(q.get("code_challenge")),
                   "a PKCE S256 code_challenge is required")]
        problem = next((why for ok, why in checks if not ok), None)
        if problem:
            return 400, {"Content-Type": "text/plain"}, problem
        request_id = secrets.token_urlsafe(16)
        with self._lock:
            self._pending[request_id] = q
        name = html.escape(self.user.get("name", self.user["sub"]))
        page = (f"<!doctype html><title>Test provider</title><h1>Test identity provider</h1>"
                f"<form method='post' action='/authorize'><input type='hidden' name='request' value='{request_id}'>"
                f"<button id='sign-in-as-test-user' type='submit'>Sign in as {name}</button></form>")
        return 200, {"Content-Type": "text/html; charset=utf-8"}, page

    def _consent(self, form: dict) -> tuple[int, dict, str]:
        """The button: a one-time code for the waiting request, back to the client's redirect URI."""
        with self._lock:
            q = self._pending.pop(form.get("request", ""), None)
            if q is None:
                return 400, {"Content-Type": "text/plain"}, "no such authorization request"
            code = secrets.token_urlsafe(24)
            self._codes[code] = q
        location = q["redirect_uri"] + "?" + urllib.parse.urlencode({"code": code, "state": q["state"]})
        return 302, {"Location": location}, ""

    def _token(self, form: dict, authorization: str | None) -> tuple[int, dict, str]:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.startswith("Basic "):
            pair = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = (urllib.parse.unquote(p) for p in pair.partition(":"))
        if client_id != self.client_id or not secrets.compare_digest(secret or "", self._client_secret):
            return _json(401, {"error": "invalid_client"})
        if form.get("grant_type") != "authorization_code":
            return _json(400, {"error": "unsupported_grant_type"})
        with self._lock:
            q = self._codes.pop(form.get("code", ""), None)      # a code is good once
        if q is None or form.get("redirect_uri") != q["redirect_uri"]:
            return _json(400, {"error": "invalid_grant"})
        verifier = form.get("code_verifier") or ""
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if challenge != q["code_challenge"]:
            return _json(400, {"error": "invalid_grant", "error_description": "PKCE verifier does not match"})
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 600, "auth_time": now,
                  "nonce": q["nonce"], "email_verified": True, **self.user}
        id_token = jwt.encode({"alg": "RS256", "kid": self._key.kid}, claims, self._key)
        return _json(200, {"access_token": secrets.token_urlsafe(24), "token_type": "Bearer", "expires_in": 600,
                           "scope": q["scope"], "id_token": id_token})

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, headers: dict, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _count(self, path: str) -> None:
                with provider._lock:
                    provider.calls[path] = provider.calls.get(path, 0) + 1

            def do_GET(self):  # noqa: N802 — http.server's name
                url = urllib.parse.urlsplit(self.path)
                self._count(url.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                if url.path == "/.well-known/openid-configuration":
                    self._answer(*_json(200, provider._metadata()))
                elif url.path == "/jwks":
                    self._answer(*_json(200, {"keys": [provider._key.as_dict(private=False)]}))
                elif url.path == "/authorize":
                    self._answer(*provider._authorize(q))
                else:
                    self._answer(404, {"Content-Type": "text/plain"}, "not found")

            def do_POST(self):  # noqa: N802
                url = urllib.parse.urlsplit(self.path)
                self._count(url.path)
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if url.path == "/authorize":
                    self._answer(*provider._consent(form))
                elif url.path == "/token":
                    self._answer(*provider._token(form, self.headers.get("Authorization")))
                else:
                    self._answer(404, {"Content-Type": "text/plain"}, "not found")

            def log_message(self, *args) -> None:     # quiet: the test's output is its assertions
                pass

        return Handler


def _json(status: int, body: dict) -> tuple[int, dict, str]:
    return status, {"Content-Type": "application/json"}, json.dumps(body)
