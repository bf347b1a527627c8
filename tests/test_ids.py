"""Artifact ids with check characters: what a mis-copy of one is told apart from, by the string alone."""

from __future__ import annotations

import base64
import itertools
import random
import re
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refvault.errors import InvalidId, MisCopiedId, NotFound
from refvault.evaluation.miscopy import corrupt
from refvault.ids import (
    ARTIFACT_ID_PATTERN,
    check_artifact_id,
    id_check,
    id_distance,
    is_artifact_id,
    lookup_id,
    new_artifact_id,
)

ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
IDS = st.builds(lambda _: new_artifact_id(), st.integers())
SETTINGS = settings(max_examples=200, deadline=None)


def legacy_id() -> str:
    """An id as it was minted before the check characters: 128 random bits as 26 characters."""
    return "art_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


def substituted(artifact_id: str, changes: dict[int, str]) -> str:
    chars = list(artifact_id)
    for position, char in changes.items():
        chars[position] = char
    return "".join(chars)


def test_a_new_id_is_art_and_28_characters_that_pass_their_check() -> None:
    for _ in range(2000):
        artifact_id = new_artifact_id()
        assert re.fullmatch(r"art_[a-z2-7]{28}", artifact_id)
        assert re.fullmatch(ARTIFACT_ID_PATTERN, artifact_id)
        assert id_check(artifact_id) == "valid"
        assert is_artifact_id(artifact_id)
        assert check_artifact_id(artifact_id) == artifact_id


def test_a_new_id_keeps_128_random_bits() -> None:
    bodies = [base64.b32decode(new_artifact_id()[4:30].upper() + "======") for _ in range(4000)]
    assert all(len(body) == 16 for body in bodies)
    ones = sum(bin(int.from_bytes(body, "big")).count("1") for body in bodies)
    assert abs(ones / (len(bodies) * 128) - 0.5) < 0.01  # every bit drawn, none fixed


def test_every_single_and_double_substitution_of_a_new_id_is_miscopied() -> None:
    artifact_id = new_artifact_id()
    for i in range(4, 32):
        for char in ALPHABET.replace(artifact_id[i], ""):
            assert id_check(substituted(artifact_id, {i: char})) == "miscopied"
    for i, j in itertools.combinations(range(4, 32), 2):
        for a, b in itertools.product(ALPHABET.replace(artifact_id[i], ""), ALPHABET.replace(artifact_id[j], "")):
            assert id_check(substituted(artifact_id, {i: a, j: b})) == "miscopied"


@SETTINGS
@given(IDS, st.lists(st.integers(4, 31), min_size=1, max_size=2, unique=True), st.data())
def test_one_or_two_changed_characters_are_always_miscopied(
    artifact_id: str, positions: list[int], data: st.DataObject
) -> None:
    changes = {p: data.draw(st.sampled_from(ALPHABET.replace(artifact_id[p], ""))) for p in positions}
    bad = substituted(artifact_id, changes)
    assert id_check(bad) == "miscopied"
    assert not is_artifact_id(bad)
    i, j = min(positions), max(positions)
    swapped = j == i + 1 and (bad[i], bad[j]) == (artifact_id[j], artifact_id[i])  # two changes that are one swap
    assert id_distance(bad, artifact_id) == (1 if swapped else len(positions))


@SETTINGS
@given(IDS, st.integers(4, 30), st.integers(4, 30))
def test_one_or_two_adjacent_swaps_are_always_miscopied(artifact_id: str, i: int, j: int) -> None:
    def swapped(value: str, k: int) -> str:
        return value[:k] + value[k + 1] + value[k] + value[k + 2 :]

    once = swapped(artifact_id, i)
    if once != artifact_id:
        assert id_check(once) == "miscopied"
    if abs(i - j) >= 2:
        twice = swapped(once, j)
        if twice != artifact_id:
            assert id_check(twice) == "miscopied"


@SETTINGS
@given(IDS, st.integers(0, 31), st.integers(0, 31))
def test_dropped_or_doubled_characters_are_miscopied(artifact_id: str, i: int, j: int) -> None:
    dropped = artifact_id[:i] + artifact_id[i + 1 :]
    doubled = artifact_id[: i + 1] + artifact_id[i:]
    assert id_check(doubled) == "miscopied"
    assert id_check(doubled[: j + 1] + doubled[j:]) == "miscopied"
    assert id_check(dropped) == "miscopied"
    twice = dropped[:j] + dropped[j + 1 :]
    # two dropped: miscopied, or a legacy-length string (its lookup then finds the id meant: tests/vault)
    assert id_check(twice) in ("miscopied", "legacy")


def test_random_edits_are_detected_by_the_string_alone_almost_always() -> None:
    rng = random.Random(5)
    ids = [new_artifact_id() for _ in range(20)]
    answers = [id_check(corrupt(rng.choice(ids), rng.choice((1, 2)), rng)) for _ in range(5000)]
    assert answers.count("valid") <= 10  # a swap and a change, or a drop and a doubling, that cancel: ~1/1024
    assert answers.count("miscopied") + answers.count("legacy") >= 4980


def test_legacy_ids_stay_valid() -> None:
    for _ in range(500):
        old = legacy_id()
        assert id_check(old) == "legacy"
        assert is_artifact_id(old)
        assert check_artifact_id(old) == old
        assert lookup_id(old) == old
        assert re.fullmatch(ARTIFACT_ID_PATTERN, old)


def test_a_legacy_length_string_with_padding_bits_was_never_minted() -> None:
    for last in ALPHABET:
        value = "art_" + "a" * 25 + last
        assert id_check(value) == ("legacy" if ALPHABET.index(last) % 4 == 0 else "miscopied")
        assert is_artifact_id(value)  # well formed: shown in messages like any id


@pytest.mark.parametrize(
    "value",
    ["", "art_", "hello", "art_" + "a" * 20, "art_" + "a" * 40, "ART_" + "A" * 28, "../../etc/passwd", None, 42],
)
def test_strings_nothing_like_an_id_are_invalid(value: object) -> None:
    assert id_check(value) == "invalid"
    assert not is_artifact_id(value)
    with pytest.raises(InvalidId) as caught:
        check_artifact_id(value)
    assert not isinstance(caught.value, MisCopiedId)
    with pytest.raises(InvalidId):
        lookup_id(value)


def test_a_near_miss_raises_miscopied_which_is_both_invalid_and_not_found() -> None:
    artifact_id = new_artifact_id()
    bad = artifact_id[:-1]
    with pytest.raises(MisCopiedId) as caught:
        check_artifact_id(bad)
    assert isinstance(caught.value, InvalidId)
    assert isinstance(caught.value, NotFound)
    assert caught.value.suggestion is None
    assert bad not in str(caught.value)
    assert "mis-copied" in str(caught.value)
    assert lookup_id(bad) == bad  # a lookup of it may still find the id meant


def test_a_near_miss_outside_the_url_safe_alphabet_is_invalid() -> None:
    artifact_id = new_artifact_id()
    assert id_check(artifact_id[:10] + "/" + artifact_id[11:]) == "invalid"
    assert id_check(artifact_id[:10] + "\n" + artifact_id[11:]) == "invalid"
    assert id_check(artifact_id[:10] + "9" + artifact_id[11:]) == "miscopied"
    assert id_check("arx_" + artifact_id[4:]) == "miscopied"


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("abcdef", "abcdef", 0),
        ("abcdef", "abxdef", 1),
        ("abcdef", "abdcef", 1),  # an adjacent swap counts once
        ("abcdef", "abcdeff", 1),
        ("abcdef", "acdef", 1),
        ("abcdef", "badcef", 2),
        ("abcdef", "xbcdey", 2),
        ("abcdef", "xycdez", 3),
        ("abcdef", "abcdefghi", 3),
    ],
)
def test_id_distance_counts_changes_drops_doublings_and_swaps(a: str, b: str, distance: int) -> None:
    assert id_distance(a, b) == distance
    assert id_distance(b, a) == distance


@SETTINGS
@given(IDS, IDS)
def test_id_distance_agrees_with_the_full_table(a: str, b: str) -> None:
    rng = random.Random(a)
    near = corrupt(a, rng.choice((1, 2)), rng)
    for x, y in ((a, b), (a, near), (near, a)):
        assert id_distance(x, y) == min(_osa(x, y), 3)


def _osa(a: str, b: str) -> int:
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]
