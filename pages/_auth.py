"""Sign-in for a dashboard shared by a team: Streamlit's own OpenID Connect login (st.login / st.user / st.logout).

A deployment turns it on with an `[auth]` section in the server's secrets.toml (docs/deployment.md: "Deploying the dashboard for a
team"); then every page requires sign-in, and a visitor who has not signed in sees the sign-in screen and nothing
else — no page list, no sidebar, no runs. Without `[auth]` (local use) nothing changes. A secrets file that is there
but cannot be read keeps the dashboard closed: a typo must not open it to everyone.

Nothing here reads or shows the client secret or the cookie secret: Streamlit's auth routes use them.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

import streamlit as st

from xc_core.views.text import markdown_plain

# The keys of a provider's settings, as st.login reads them: [auth] itself (the default provider) or [auth.NAME].
_PROVIDER_KEYS = ("client_id", "server_metadata_url")
_UNREADABLE = "unreadable"


def _auth_section():
    """The [auth] section of the server's secrets, None when there is none, or _UNREADABLE when a secrets file is
    there but could not be parsed (Streamlit logs why when the server starts)."""
    if st.secrets.load_if_toml_exists():
        section = st.secrets.get("auth")
        return section if isinstance(section, Mapping) and section else None
    if any(os.path.exists(path) for path in st.get_option("secrets.files")):
        return _UNREADABLE
    return None


def required() -> bool:
    """Whether this server requires sign-in (an [auth] section, or a secrets file it cannot read)."""
    return _auth_section() is not None


def signed_in() -> bool:
    return bool(st.user.get("is_logged_in"))


def must_sign_in() -> bool:
    """Whether this session may see nothing but the sign-in screen."""
    return required() and not signed_in()


def user() -> str | None:
    """Who started a run, as the run store records it: the signed-in user's email, else the provider's subject id;
    None where the dashboard has no sign-in."""
    if not required() or not signed_in():
        return None
    who = st.user.get("email") or st.user.get("sub")
    return str(who) if who else None


def providers(section: Mapping) -> list[str | None]:
    """The providers st.login can use: None for the default one ([auth] holds its settings), then each
    [auth.NAME] section that holds a provider's settings."""
    named = [name for name, value in section.items()
             if isinstance(value, Mapping) and any(k in value for k in _PROVIDER_KEYS)]
    return ([None] if any(k in section for k in _PROVIDER_KEYS) else []) + sorted(named)


def sign_in_screen() -> None:
    """The whole page for a visitor who has not signed in: why, and a button per provider. Stops the script."""
    from streamlit.errors import StreamlitAuthError
    st.title("Sign in")
    section = _auth_section()
    if section == _UNREADABLE:
        st.error("This dashboard requires sign-in, but the server's secrets.toml cannot be read (its log says why); "
                 "nothing is shown until it is fixed and the server restarted.")
        st.stop()
    st.write("This xc dashboard is for signed-in users: the models it analyses, the runs it keeps and their "
             "artifacts are visible only after you sign in.")
    choices = providers(section)
    if not choices:
        st.error("This dashboard requires sign-in, but the [auth] section of the server's secrets.toml names no "
                 "provider (client_id, client_secret and server_metadata_url in [auth] or in [auth.NAME]).")
        st.stop()
    for provider in choices:
        label = "Sign in" if provider is None else f"Sign in with {provider}"
        if st.button(label, key=f"sign_in_{provider or 'default'}", type="primary"):
            try:
                st.login(provider)
            except StreamlitAuthError as e:     # an incomplete [auth] section: Streamlit's words, on one line
                st.error("Sign-in cannot start: " + markdown_plain(" ".join(str(e).split())))
    st.stop()


def account_panel(sb) -> None:
    """Who is signed in, with a sign-out button (only on a dashboard that requires sign-in)."""
    if not required():
        return
    name, email = st.user.get("name"), st.user.get("email") or st.user.get("sub")
    who = " · ".join(markdown_plain(str(v)) for v in (name, email) if v) or "a signed-in user"
    c1, c2 = sb.columns([3, 2], vertical_alignment="center")
    c1.caption(f"Signed in as **{who}**")
    if c2.button("Sign out", key="sign_out"):
        st.logout()
        st.stop()
