"""A retrieval that records what each search asks for, for the tests of how scoring searches."""

from __future__ import annotations


class Asked:
    """A retrieval that records the k each search asks for."""

    def __init__(self, inner) -> None:
        self.inner, self.approximate, self.ks = inner, inner.approximate, []

    def ranking(self, state, k, references=None, queries=None):
        self.ks.append(k)
        return self.inner.ranking(state, k, references, queries=queries)

    def describe(self) -> str:
        return self.inner.describe()
