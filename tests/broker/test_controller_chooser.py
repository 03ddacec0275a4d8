"""ControllerChooser: which controller a broker asks next after an answer, a NOT_CONTROLLER or silence."""

from __future__ import annotations

import pytest

from kanal.broker.controller_chooser import ControllerChooser

A, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


def test_starts_at_the_first_and_sticks_to_the_controller_that_answered_a_broker_call():
    chooser = ControllerChooser([A, B, C])
    assert chooser.first(0) == A
    chooser.on_answer(B, is_active=True)
    assert chooser.first(0) == B
    # A read answered by a standby says nothing about who is active.
    chooser.on_answer(C, is_active=False)
    assert chooser.first(0) == B


def test_follows_a_hint_and_remembers_it_as_active():
    chooser = ControllerChooser([A, B, C])
    assert chooser.on_not_controller(A, C, now_ms=0) == C
    assert chooser.active == C
    assert chooser.first(0) == C


def test_not_controller_without_a_usable_hint_moves_round_the_list():
    chooser = ControllerChooser([A, B, C])
    assert chooser.on_not_controller(A, "", now_ms=0) == B
    assert chooser.active is None
    assert chooser.on_not_controller(B, B, now_ms=0) == C  # a hint naming itself is no hint
    assert chooser.on_not_controller(C, "10.0.0.9:1", now_ms=0) == A  # nor is an unknown endpoint


def test_a_paused_active_controller_is_avoided_while_the_others_still_name_it():
    """The issue-17 case: A (active) hangs; B and C still name A until their election timeout passes.
    The broker must not go back to A on their word, but keep asking B and C until one of them is active."""
    chooser = ControllerChooser([A, B, C])
    chooser.on_answer(A, is_active=True)
    now = 1_000
    assert chooser.on_silent(A, silent_ms=200, now_ms=now) == B
    assert chooser.active is None
    assert chooser.first(now) == B  # the next call does not start at A either
    assert chooser.on_not_controller(B, A, now_ms=now + 50) == C
    assert chooser.on_not_controller(C, A, now_ms=now + 100) == B
    # The election is over: B names C, C answers the heartbeat.
    assert chooser.on_not_controller(B, C, now_ms=now + 150) == C
    chooser.on_answer(C, is_active=True)
    assert chooser.first(now + 150) == C


def test_an_avoided_controller_is_tried_again_once_its_time_is_over():
    chooser = ControllerChooser([A, B, C])
    chooser.on_silent(A, silent_ms=200, now_ms=0)
    assert chooser.avoided(A, 199) and not chooser.avoided(A, 200)
    # A hint naming A is followed again after the avoidance (A was only slow, and is still active).
    assert chooser.on_not_controller(B, A, now_ms=150) == C
    assert chooser.on_not_controller(C, A, now_ms=250) == A
    chooser.on_answer(A, is_active=True)
    assert not chooser.avoided(A, 250) and chooser.first(250) == A


def test_when_every_controller_is_silent_the_one_avoided_shortest_comes_first():
    chooser = ControllerChooser([A, B, C])
    chooser.on_silent(A, silent_ms=500, now_ms=0)
    chooser.on_silent(B, silent_ms=100, now_ms=0)
    assert chooser.on_silent(C, silent_ms=300, now_ms=0) == B
    assert chooser.first(10) == B


def test_a_single_controller_is_always_the_one_asked():
    chooser = ControllerChooser([A])
    assert chooser.on_silent(A, silent_ms=100, now_ms=0) == A
    assert chooser.on_not_controller(A, "", now_ms=0) == A


def test_endpoints_must_be_given_and_distinct():
    with pytest.raises(ValueError):
        ControllerChooser([])
    with pytest.raises(ValueError):
        ControllerChooser([A, A])


NOW = 10_000


def test_a_quorum_change_replaces_the_controllers_keeping_what_still_holds():
    chooser = ControllerChooser(["c1", "c2", "c3"])
    chooser.on_answer("c2", is_active=True)
    chooser.on_silent("c1", 1_000, NOW)
    # c3 removed, c4 added: the active one stays, c1 is still avoided, c4 comes in the ring.
    chooser.set_endpoints(["c1", "c2", "c4"])
    assert chooser.endpoints == ("c1", "c2", "c4")
    assert chooser.first(NOW) == "c2"
    assert chooser.on_not_controller("c2", "c4", NOW) == "c4"
    # The active controller removed: unknown until a call finds it.
    chooser.set_endpoints(["c1", "c2"])
    assert chooser.active is None
    assert chooser.first(NOW) == "c2"  # c1 is avoided
    with pytest.raises(ValueError):
        chooser.set_endpoints([])
