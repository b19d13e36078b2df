"""The memory planner on its own (no GPU): lifetimes in, buffer assignments out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pterun.backends.webgpu.graph import DType
from pterun.backends.webgpu.memory import Lifetime, lifetimes, plan
from pterun.backends.webgpu.node import Node
from pterun.backends.webgpu.slots import CONST, INPUT, PLAN, SSlot, Storage, TSlot


def overlap(a: Lifetime, b: Lifetime) -> bool:
    # A storage that starts at the node where another ends is live with it: the node reads one and
    # writes the other.
    return a.first <= b.last and b.first <= a.last


def peak(lives: list[Lifetime]) -> int:
    steps = {s for life in lives for s in (life.first, life.last)}
    return max((sum(life.first <= s <= life.last for life in lives) for s in steps), default=0)


def check(lives: list[Lifetime]):
    result = plan(lives)
    assert len(result.buffer_of) == len(lives)
    for k, (life, p) in enumerate(zip(lives, result.buffer_of, strict=True)):
        assert result.sizes[p] >= life.nbytes, f"lifetime {k} does not fit its buffer"
        for j in range(k):
            if result.buffer_of[j] == p:
                assert not overlap(lives[j], life), f"lifetimes {j} and {k} share buffer {p} while both live"
    # A buffer is added only when every existing one is in use.
    assert len(result.sizes) == peak(lives)
    return result


def test_nothing_to_plan():
    assert plan([]).buffer_of == [] and plan([]).sizes == []


def test_a_chain_alternates_two_buffers():
    # x0 -> x1 -> x2 -> x3: each node reads its input and writes its output, so neighbours never share.
    lives = [Lifetime(i, i + 1, 400) for i in range(4)]
    result = check(lives)
    assert result.buffer_of == [0, 1, 0, 1] and result.sizes == [400, 400]


def test_a_value_read_later_keeps_its_buffer():
    lives = [Lifetime(0, 3, 64), Lifetime(1, 2, 64), Lifetime(2, 3, 64), Lifetime(3, 4, 64)]
    result = check(lives)
    assert result.buffer_of[1] != result.buffer_of[2]
    assert result.buffer_of[0] not in (result.buffer_of[1], result.buffer_of[2], result.buffer_of[3])
    assert result.buffer_of[3] == result.buffer_of[1]


def test_the_smallest_free_buffer_that_fits():
    lives = [Lifetime(0, 1, 1000), Lifetime(0, 1, 100), Lifetime(2, 3, 80)]
    result = check(lives)
    assert result.buffer_of[2] == result.buffer_of[1] and result.sizes == [1000, 100]


def test_the_largest_new_storage_is_placed_first():
    # Placed first, the 900 bytes take the free 1000-byte buffer; the 90 bytes get a buffer of their own.
    lives = [Lifetime(0, 1, 1000), Lifetime(2, 3, 90), Lifetime(2, 3, 900)]
    result = check(lives)
    assert result.buffer_of[2] == result.buffer_of[0] and result.sizes == [1000, 90]


def test_a_free_buffer_grows_rather_than_a_new_one_is_made():
    lives = [Lifetime(0, 1, 100), Lifetime(0, 1, 200), Lifetime(2, 3, 500)]
    result = check(lives)
    assert result.buffer_of[2] == result.buffer_of[1] and sorted(result.sizes) == [100, 500]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 5), st.integers(0, 4096)).map(
            lambda t: Lifetime(t[0], t[0] + t[1], t[2])
        ),
        max_size=25,
    )
)
def test_no_two_live_values_share_a_buffer(lives):
    check(lives)


# -- lifetimes of a compiled graph's storages --------------------------------------------------------


def tensor(vid: int, kind: str = PLAN, storage: Storage | None = None) -> TSlot:
    return TSlot(vid, DType.FLOAT32, (4,), 4, storage or Storage(16, kind))


def node(index: int, reads=(), outputs=(), scratch=()) -> Node:
    return Node(index, f"op{index}", set(), list(reads), [(s, tuple) for s in outputs], scratch=list(scratch))


def test_lifetimes_of_a_graph():
    x, c = tensor(0, INPUT), tensor(1, CONST)
    a = tensor(2)
    view = tensor(3, storage=a.storage)  # a view of a: one storage, live while either is
    b, n = tensor(4), SSlot(5)
    tmp = tensor(-1)
    out = tensor(6)
    nodes = [
        node(0, reads=[x, c], outputs=[a]),
        node(1, reads=[a], outputs=[view, n]),
        node(2, reads=[x], outputs=[b], scratch=[tmp]),
        node(3, reads=[view, b], outputs=[out]),
    ]
    lives = lifetimes(nodes, [out, n])
    # Inputs and constants have buffers of their own; planned storages come in the order first written.
    assert list(lives) == [a.storage, b.storage, tmp.storage, out.storage]
    assert lives[a.storage] == Lifetime(0, 3, 16)
    assert lives[b.storage] == Lifetime(2, 3, 16)
    assert lives[tmp.storage] == Lifetime(2, 2, 16)
    assert lives[out.storage] == Lifetime(3, 4, 16), "a graph output lives past the last node"
    result = check(list(lives.values()))
    assert result.buffer_of[2] != result.buffer_of[1], "scratch is live with its node's output"
