"""examples/custom_model.py's model (pipeline_yield marks, an embedding
shared by the first and the last stage) trains to the same losses, bit for
bit, under every built-in schedule at P = 1, 2 and 4 as the graph without
yields on one rank."""
import pytest

import custom_model as cm  # examples/custom_model.py
import pipit

STEPS, M = 2, 8


@pytest.fixture(scope="module")
def reference():
    return cm.train(None, 1, 0, STEPS, M)


@pytest.mark.parametrize("P", [1, 2, 4])
def test_every_schedule_matches_one_rank(reference, P):
    ran = []
    for name in pipit.schedule_names():
        try:
            sched = pipit.Schedule(name, P, 0, M)
        except pipit.Error as e:  # a schedule that needs more ranks than P (named in the message)
            assert P == 1, "%s at P %d: %s" % (name, P, e)
            continue
        stages = sched.stages
        sched.close()
        if cm.L % stages:
            continue
        losses = cm.train(name, P, 0, STEPS, M)
        assert losses == reference, "%s at P %d" % (name, P)
        ran.append(name)
    assert len(ran) >= (4 if P == 1 else len(pipit.schedule_names()))


def test_the_example_runs_and_learns():
    assert cm.main(["--steps", "12"]) == 0
