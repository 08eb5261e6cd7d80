"""`pg-distlock console`: the web console (needs the `console` extra:
Starlette, uvicorn and Jinja2). See docs/console.md."""

from __future__ import annotations

from typing import Optional

from .app import create_app

__all__ = ["create_app", "serve"]


def serve(dsn: str, host: str = "127.0.0.1", port: int = 8080, pool_size: int = 4,
          allowed_hosts: Optional[list[str]] = None) -> None:
    """Serves the console on host:port; it answers Host headers of loopback
    names, `host` and `allowed_hosts`."""
    import uvicorn

    hosts = [host, *(allowed_hosts or [])]
    uvicorn.run(create_app(dsn, pool_size, hosts), host=host, port=port, log_level="warning", access_log=False)
