"""How a user runs the conformance kit over a store of their own (see the docs)."""

from __future__ import annotations

import pytest
from dict_store import DictStore

from scheduling.abc import ExecutionStore
from scheduling.testing import StoreConformance


class TestDictStore(StoreConformance):
    """Every check of the kit, over a fresh ``DictStore``."""

    @pytest.fixture
    def store(self) -> DictStore:
        return DictStore()

    def corrupt(self, store: ExecutionStore, execution_id: str, text: str) -> None:
        """Write ``text`` over one stored record: the kit then checks how it is read."""
        assert isinstance(store, DictStore)
        store._rows[execution_id].text = text
