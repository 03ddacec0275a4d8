"""Every mutation of `kanal chaos` still applies to today's broker code: each of its edits finds its text
exactly once. The cluster tests that show a mutation is caught take minutes; this says at once, and by
name, which edit a change to the broker broke."""

from __future__ import annotations

import pytest

from kanal.deploy.chaos.mutation import MUTATIONS, make_mutant


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_the_mutation_applies_to_the_broker_as_it_is(name):
    mutant = make_mutant(name)
    try:
        for file, _, replacement in MUTATIONS[name]:
            assert replacement in (mutant.directory / file).read_text()
    finally:
        mutant.close()
    assert not mutant.directory.exists()


def test_an_unknown_mutation_is_refused():
    with pytest.raises(ValueError, match="unknown mutation"):
        make_mutant("no-such-mutation")


def test_mutations_joined_by_plus_apply_together_and_an_unknown_part_is_refused():
    names = ["abort-markers-ignored", "compaction-keeps-older", "stale-generation-commit"]
    mutant = make_mutant("+".join(names))
    try:
        for name in names:
            for file, _, replacement in MUTATIONS[name]:
                assert replacement in (mutant.directory / file).read_text()
    finally:
        mutant.close()
    with pytest.raises(ValueError, match="unknown mutation 'nope'"):
        make_mutant("abort-markers-ignored+nope")
