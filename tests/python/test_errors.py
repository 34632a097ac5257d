"""Every failure raises a pipit.Error subclass carrying pipit's own message
(the interpreter stays alive): a bad shape, a bad mesh, a closed handle, a
freed graph's value, a bad file, an unknown name."""
import pytest

import pipit


def test_bad_shape_raises_shape_error_with_pipits_message():
    with pipit.Graph() as g:
        a = g.input("a", [2, 3])
        b = g.input("b", [3, 3])
        with pytest.raises(pipit.ShapeError, match=r"pipit_add: add\(f32 \[2,3\], f32 \[3,3\]\): shapes do not broadcast"):
            a + b
        with pytest.raises(pipit.Error):  # the graph stays failed, as in C
            g.input("c", [1])


def test_matmul_mismatch_and_bad_dtype():
    with pipit.Graph() as g:
        with pytest.raises(pipit.ShapeError, match="matmul"):
            g.param("w", [4, 5]) @ g.param("v", [4, 5])
    with pytest.raises(pipit.InvalidError, match="unknown dtype 'f16'"):
        pipit.Graph().input("x", [1], "f16")


def test_bad_mesh_raises_with_pipits_message(text_file):
    # 4 heads do not split over 3 tensor-parallel ranks
    with pytest.raises(pipit.InvalidError, match="tensor parallelism 3 does not divide heads 4"):
        pipit.Trainer(pipit.models.preset("tiny", layers=2, ctx=16), data=text_file, tp=3)
    with pytest.raises(pipit.Error, match="rank"):
        pipit.Schedule("1f1b", 0, 0, 4)


def test_compile_with_a_schedule_of_the_wrong_stage_count():
    import custom_model as cm
    g, loss = cm.build(2)
    with pipit.Schedule("1f1b", 4, 0, 4) as s:
        with pytest.raises(pipit.Error, match="stage"):
            pipit.Program(g, loss, schedule=s, microbatches=4)
    g.close()


def test_closed_handle_and_freed_graphs_value_raise_misuse():
    g = pipit.Graph()
    x = g.input("x", [2])
    g.close()
    g.close()  # idempotent
    with pytest.raises(pipit.MisuseError, match="graph is NULL"):
        g.input("y", [2])
    with pytest.raises(pipit.MisuseError, match="NULL"):
        x + x
    s = pipit.Schedule("gpipe", 2, 0, 2)
    s.close()
    with pytest.raises(pipit.MisuseError):
        s.check()


def test_closed_program_step_raises_misuse():
    import custom_model as cm
    g, loss = cm.build(1)
    p = pipit.Program(g, loss, microbatches=1)
    feeds = cm.batches(1, 0)
    p.step(feeds)
    p.close()
    with pytest.raises(pipit.MisuseError):
        p.step(feeds)
    g.close()


def test_bad_feed_raises_with_pipits_message():
    import custom_model as cm
    g, loss = cm.build(1)
    with pipit.Program(g, loss, microbatches=1) as p:
        with pytest.raises(pipit.Error, match="tokens"):
            p.step({"tokens": [1, 2, 3], "targets": [0] * (cm.B * cm.T)})
    g.close()


def test_bad_files(tmp_path):
    with pytest.raises(pipit.IOFailure, match="/nonexistent/x.safetensors"):
        pipit.Checkpoint("/nonexistent/x.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x07\x00\x00\x00\x00\x00\x00\x00{broken")
    with pytest.raises(pipit.FormatError):
        pipit.Checkpoint(str(junk))
    with pytest.raises(pipit.Error, match="nope.txt"):
        pipit.Data(str(tmp_path / "nope.txt"), 16)
    with pytest.raises(pipit.Error):
        pipit.Schedule.load(str(junk))


def test_unknown_names():
    with pytest.raises(pipit.InvalidError, match="unknown schedule 'zb-h9'"):
        pipit.Schedule("zb-h9", 2, 0, 4)
    with pytest.raises(pipit.InvalidError, match="unknown preset"):
        pipit.models.preset("gpt5")
    with pytest.raises(pipit.InvalidError, match="softmax works on the last axis"):
        with pipit.Graph() as g:
            pipit.softmax(g.input("x", [2, 3]), axis=0)


def test_error_carries_status():
    try:
        pipit.Checkpoint("/nonexistent/y")
    except pipit.Error as e:
        assert e.status == pipit.C.PIPIT_STATUS_IO
        assert e.status_name == "i/o error"
        assert isinstance(e, OSError)
