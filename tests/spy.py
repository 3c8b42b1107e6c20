"""Shared by the fast-path tests: count the calls of a module's function, so a test can show
that the path it checks really ran (and that its reference did not)."""

from __future__ import annotations


def count_calls(monkeypatch, owner, name: str) -> list:
    """Replace ``owner.name`` (for the test) by a wrapper that appends 1 to the returned list
    on each call and then calls the original."""
    calls: list = []
    real = getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls
