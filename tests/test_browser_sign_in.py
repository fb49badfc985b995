"""Sign-in end to end in Chromium: a dashboard whose secrets.toml has an [auth] section shows a visitor the sign-in
screen and nothing else, signs them in through a real OpenID Connect exchange with a provider on loopback
(tests/oidc_provider.py), then shows the app with their name, and the run they start is recorded under them.

The secrets file is written to the test's temporary folder and named to the server by Streamlit's own setting
(STREAMLIT_SECRETS_FILES, i.e. `secrets.files`): none is ever written into the repository."""
import contextlib
import json
import os
import secrets

import pytest

from browser import CHROMIUM, FLAGS, dashboard, free_port, settle
from oidc_provider import OidcProvider

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")

USER = {"sub": "u-4711", "email": "ada@example.test", "name": "Ada Lovelace"}


@contextlib.contextmanager
def _secrets_file(path, values: dict):
    """An [auth] section in a file only its owner reads, removed when the block ends (the test's secrets are
    random, but a secret is not left on disk). TOML's basic strings are JSON's for these ASCII values."""
    path.touch(mode=0o600)
    path.write_text("[auth]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    try:
        yield path
    finally:
        path.unlink()


def test_a_visitor_signs_in_through_the_provider_and_their_run_is_recorded_under_them(tmp_path):
    from playwright.sync_api import sync_playwright
    from xc_core.store import RunStore
    port = free_port()
    client_secret, cookie_secret = secrets.token_urlsafe(24), secrets.token_urlsafe(32)
    redirect_uri = f"http://127.0.0.1:{port}/oauth2callback"      # the host the browser uses: the cookies' host
    home = tmp_path / "home"
    seen = []       # every page's HTML: no secret may ever reach the browser
    with OidcProvider("xc-dashboard", client_secret, redirect_uri, USER) as provider, _secrets_file(
            tmp_path / "secrets.toml", {"redirect_uri": redirect_uri, "cookie_secret": cookie_secret,
                                        "client_id": "xc-dashboard", "client_secret": client_secret,
                                        "server_metadata_url": provider.metadata_url}) as secrets_file:
        # One target: the run the signed-in user starts is the landing page's, the default sample on ort-cpu.
        env = {"XC_HOME": str(home), "STREAMLIT_SECRETS_FILES": str(secrets_file), "XC_DEFAULT_TARGETS": "ort-cpu"}
        with dashboard(env=env, port=port) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # A link to a run's downloads, before signing in: the sign-in screen, and nothing else.
            page.goto(f"{url}downloads?run=0123456789ab", timeout=120_000)
            settle(page)
            page.get_by_role("heading", name="Sign in").wait_for(timeout=60_000)
            seen.append(page.content())
            assert page.locator('[data-testid="stSidebarNav"]').count() == 0        # no page list
            assert page.locator('[data-testid="stFileUploader"]').count() == 0      # no upload
            assert page.locator('[data-testid="stSidebarUserContent"]').count() == 0
            assert page.get_by_text("History").count() == 0 and page.get_by_text("Downloads").count() == 0
            assert page.locator('[data-testid="stException"]').count() == 0

            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{provider.issuer}/authorize?*", timeout=60_000)
            seen.append(page.content())
            page.locator("#sign-in-as-test-user").click()
            page.wait_for_url(f"{url}*", timeout=60_000)
            settle(page)
            page.get_by_text("Signed in as").wait_for(timeout=60_000)
            assert "Ada Lovelace" in page.locator('[data-testid="stSidebar"]').inner_text()
            assert page.locator('[data-testid="stSidebarNav"] a', has_text="History").count() == 1
            # The app itself: the default sample analysed, its report on the Overview.
            page.locator('[data-testid="stMain"] [data-testid="stCaptionContainer"]',
                         has_text="tts-mini").first.wait_for(timeout=600_000)
            page.locator('[data-testid="stSidebarNav"] a', has_text="History").first.click()
            settle(page)
            page.get_by_role("heading", name="History").wait_for(timeout=60_000)
            picked = page.locator('[data-testid="stMain"] [data-testid="stSelectbox"] input').first.input_value()
            assert "tts-mini" in picked and "dashboard by ada@example.test" in picked        # who ran it
            seen.append(page.content())
            assert page.locator('[data-testid="stException"]').count() == 0
            browser.close()
    runs = RunStore(str(home)).runs()
    assert [(r["source_name"], r["summary"]["origin"], r["user"]) for r in runs] == [
        ("tts-mini", "dashboard", "ada@example.test")]
    # A real exchange happened: discovery, the user's click, one code exchanged, the signature checked on the JWKS.
    assert provider.calls.get("/.well-known/openid-configuration") and provider.calls.get("/jwks")
    assert provider.calls.get("/token") == 1
    assert not any(s in html for html in seen for s in (client_secret, cookie_secret))
