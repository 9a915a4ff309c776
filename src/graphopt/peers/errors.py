"""How a peer fails: one error that names the peer and what to try (chapter 7).

A worker process cannot raise into its parent, so it sends the message back and
the parent raises `PeerError`; building or opening a peer raises it directly.
"""

from __future__ import annotations

from ..errors import GraphoptError


class PeerError(GraphoptError, RuntimeError):
    """A peer could not be built or run (the message says which and what to try)."""
