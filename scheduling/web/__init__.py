"""The HTTP face of a runner: webhook deliveries by resume token, and a live read-only view.

Install with ``pip install 'prana-workflows[web]'``. ``create_app(runner)`` builds a
Starlette app to mount in FastAPI/Starlette (``app.mount("/prana", create_app(runner))``)
or to serve alone (``prana serve``). The docs' HTTP routes page lists the routes and the
token format.
"""

from scheduling.web._app import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]
