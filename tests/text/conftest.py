"""Fixtures of the text tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def no_network() -> Iterator[None]:
    """Any connection or name lookup fails the test: NeMo's tokenizers (the references) must work offline."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network or download attempted: {args!r}")

    with pytest.MonkeyPatch.context() as patch:
        for target, name in [
            (socket.socket, "connect"),
            (socket.socket, "connect_ex"),
            (socket, "create_connection"),
            (socket, "getaddrinfo"),
        ]:
            patch.setattr(target, name, refuse)
        yield
