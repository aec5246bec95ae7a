"""Liveness probes: is the port free, is the process alive, does the server answer."""

from __future__ import annotations

import socket

import requests

HOST = "127.0.0.1"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The bearer token every server's --api-key expects; no header without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def free_port(host: str = HOST) -> int:
    """A port the kernel just handed out, so very likely unused right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether the port can be bound on every address now, as a server's own listen would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
            sock.listen(1)
        except OSError:
            return False
    return True


def port_answers(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on the port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def health(base_url: str, timeout: float = 2.0, headers: dict[str, str] | None = None,
           route: str = "/health") -> tuple[bool, str]:
    """(healthy, detail) from the server's health route; never raises."""
    try:
        resp = requests.get(f"{base_url}{route}", timeout=timeout, headers=headers)
    except requests.RequestException as exc:
        return False, f"health check failed: {type(exc).__name__}"
    if resp.status_code == 200:
        return True, "ok"
    return False, f"health check answered HTTP {resp.status_code}: {resp.text[:200]}"
