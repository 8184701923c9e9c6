"""How regal writes files (issue 37): atomically, with the umask's mode, through a symbolic link,
never over a FIFO or an input, and cleaning up what a killed write left behind."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from regal._io import atomic_text, check_writable, clean_stale_temps


def _write(path, text="x\n"):
    with atomic_text(path) as f:
        f.write(text)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask):
    """A new file gets 0666 less the umask, as `open` gives, not tempfile's 0600."""
    old = os.umask(umask)
    try:
        _write(tmp_path / "a.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.json").st_mode) == 0o666 & ~umask


def test_a_symlink_output_is_written_through(tmp_path):
    """-o LINK replaces the link's target and keeps the link."""
    (tmp_path / "real.json").write_text("old\n")
    os.symlink("real.json", tmp_path / "link.json")
    check_writable(tmp_path / "link.json")
    _write(tmp_path / "link.json", "new\n")
    assert os.path.islink(tmp_path / "link.json") and (tmp_path / "real.json").read_text() == "new\n"


def test_a_fifo_output_is_refused_in_one_line(tmp_path):
    """A FIFO is not replaced by a regular file: the pre-check and the write refuse it."""
    os.mkfifo(tmp_path / "pipe.json")
    for fn in (lambda: check_writable(tmp_path / "pipe.json"), lambda: _write(tmp_path / "pipe.json")):
        with pytest.raises(OSError, match="not a regular file") as e:
            fn()
        assert "\n" not in str(e.value)
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe.json").st_mode)


def test_an_output_equal_to_an_input_is_refused(tmp_path):
    """The pre-check refuses an output that is one of the command's inputs, by any path."""
    (tmp_path / "g.json").write_text("{}")
    os.symlink("g.json", tmp_path / "alias.json")
    for out in ("g.json", "alias.json", "./g.json"):
        with pytest.raises(OSError, match="also an input"):
            check_writable(tmp_path / out, inputs=[str(tmp_path / "g.json")])
    check_writable(tmp_path / "other.json", inputs=[str(tmp_path / "g.json")])


def test_the_pre_check_names_a_missing_directory(tmp_path):
    """-o missing/dir/x fails before any work, naming the path, not a temporary file."""
    with pytest.raises(OSError, match="no such directory"):
        check_writable(tmp_path / "missing" / "x.json")
    with pytest.raises(OSError) as e:
        _write(tmp_path / "missing" / "x.json")
    assert "x.json" in str(e.value) and ".tmp" not in str(e.value)


def test_temporary_files_of_killed_writes_are_removed_by_the_next_write(tmp_path):
    """A temporary file whose writer died (kill -9 mid-write) goes at the next write of that path;
    one of a live writer stays, and so do other files."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f"s.json.{dead_pid}-0123abcd.tmp.json"
    live = tmp_path / f"s.json.{os.getppid()}-0123abcd.tmp.json"
    other = tmp_path / "s.json.notes"
    for f in (orphan, live, other):
        f.write_text("partial")
    _write(tmp_path / "s.json")
    assert not orphan.exists() and live.exists() and other.exists()
    assert sorted(os.listdir(tmp_path)) == sorted(["s.json", live.name, other.name])
    assert clean_stale_temps(tmp_path / "s.json") == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    """An error in the body keeps the earlier file and removes the temporary file."""
    _write(tmp_path / "a.json", "good\n")
    with pytest.raises(RuntimeError):
        with atomic_text(tmp_path / "a.json") as f:
            f.write("half")
            raise RuntimeError
    assert os.listdir(tmp_path) == ["a.json"] and (tmp_path / "a.json").read_text() == "good\n"


def test_metis_warnings_never_reach_stdout():
    """METIS prints its warnings to the C stdout (300 parts of a 1,044-node graph); they go to
    stderr, so a `--json` answer on stdout stays one JSON document."""
    code = ("import regal, sys; from regal.structure import metis_placement; "
            "metis_placement(regal.load(sys.argv[1]), 300, 0); print('{}')")
    path = Path(__file__).resolve().parents[1] / "data" / "graphs" / "real" / "densenet121_b32_fwd_opt.json.gz"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout == "{}\n"
    assert "too many parts" in out.stderr
