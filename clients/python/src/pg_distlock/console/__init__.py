"""`pg-distlock console`: the web console (needs the `console` extra:
Starlette, uvicorn and Jinja2). See docs/console.md."""

from __future__ import annotations

from typing import Optional

from .app import create_app

__all__ = ["create_app", "serve"]


def serve(dsn: str, host: str = "127.0.0.1", port: int = 8080, pool_size: int = 4,
          allowed_hosts: Optional[list[str]] = None) -> None:
    import uvicorn

    hosts = allowed_hosts
    if hosts is None and host not in ("127.0.0.1", "localhost", "::1"):
        hosts = ["127.0.0.1", "localhost", host]
    uvicorn.run(create_app(dsn, pool_size, hosts), host=host, port=port, log_level="warning", access_log=False)
