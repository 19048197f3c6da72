"""``with`` for the gate's objects that hold a log file open: the block's end closes them."""

from __future__ import annotations

from typing import Self


class Closing:
    """A base whose ``with obj:`` gives ``obj`` and calls ``obj.close()`` however the block
    ends; a subclass defines :meth:`close`."""

    __slots__ = ()  # so that a subclass with __slots__ (LiveGate) gets no instance __dict__

    def close(self) -> None:
        """Release what the object holds open."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
