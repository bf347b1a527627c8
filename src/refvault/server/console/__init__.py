"""The refvault console: artifacts, runs, lineage and the audit log in a browser, served by ``refvault serve``.

Server-rendered HTML from the package (templates and one stylesheet shipped in the wheel; no script, no
Node toolchain). Each module holds one job:

* :mod:`refvault.server.console.signin`: sign-in by API key or single-use link, session cookies, CSRF tokens;
* :mod:`refvault.server.console.pages`: the routes (``/console``, ``/console/artifacts/{id}``,
  ``/console/runs``, ``/console/audit``) and ``POST /v1/console/sessions``;
* :mod:`refvault.server.console.views`: what an artifact's bytes look like by media type;
* :mod:`refvault.server.console.render`: templates and the security headers every page carries.

Invariants (tested in a real Chromium, ``tests/server/console/``): the console acts as the viewer's API key
with recipient ``user`` and reaches nothing that key could not; absent, foreign and policy-denied artifacts
look the same; sealed artifacts show metadata only; every artifact byte shown is escaped text; active types
(HTML, SVG, ...) are never rendered as documents; the Content-Security-Policy allows no script at all and no
framing; every state-changing form needs a CSRF token.
"""

from __future__ import annotations

from refvault.server.console.pages import api_router, router

__all__ = ["api_router", "router"]
