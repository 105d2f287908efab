"""Answering a change once it is stored, with one commit for the changes of one loop turn.

Under churn the service answers many changes in each turn of its event loop. With the store
holding its commits (SubscriptionStore.hold_commits), the first write of a turn opens a
transaction and schedules `commit` for the end of the turn; every handler of that turn awaits
`stored()` and is answered after that one commit (the log's page writes are paid once, and the
rows of sequential ids share their pages).
"""
from __future__ import annotations

import asyncio

from .store import SubscriptionStore


class Commits:
    def __init__(self, store: SubscriptionStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store, self.loop = store, loop
        self._waiting: list[asyncio.Future] = []
        store.hold_commits(self._opened)

    def _opened(self) -> None:
        self.loop.call_soon(self.commit)

    def commit(self) -> None:
        error = self.store.commit()
        waiting, self._waiting = self._waiting, []
        for fut in waiting:
            if fut.done():                   # its handler was cancelled (the client went away)
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

    async def stored(self) -> None:
        """Returns once every write made so far is committed; StoreError if it was rolled back."""
        if not self.store.db.in_transaction:
            return
        fut = self.loop.create_future()
        self._waiting.append(fut)
        await fut

    def close(self) -> None:
        """Commit what is open; the store commits each write at once again."""
        self.commit()
        self.store.hold_commits(None)
