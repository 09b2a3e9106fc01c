"""Each fault run writes to a folder of its own, also when runs start side by side."""

from __future__ import annotations

from pathlib import Path

from bench.faults.run import RunConfig, results_folder


def test_runs_started_together_get_their_own_folders(tmp_path: Path) -> None:
    strict = RunConfig(system="kbroker", seconds=60, seed=303, out=tmp_path / "out")
    acks1 = RunConfig(system="kbroker", seconds=60, seed=303, acks="1", out=tmp_path / "out")
    unclean = RunConfig(system="kbroker", seconds=60, seed=303, unclean=True, out=tmp_path / "out")
    folders = [
        results_folder(strict, "aaaa"),
        results_folder(strict, "bbbb"),
        results_folder(acks1, "aaaa"),
        results_folder(unclean, "aaaa"),
    ]
    assert len(set(folders)) == 4 and all(f.is_dir() for f in folders)
    names = [f.name for f in folders]
    assert names[0].startswith("kbroker-seed303-2") and names[0].endswith("-aaaa")
    assert names[2].startswith("kbroker-seed303-acks1-")
    assert names[3].startswith("kbroker-seed303-unclean-")


def test_a_folder_is_never_shared(tmp_path: Path) -> None:
    cfg = RunConfig(system="kafka", seconds=60, seed=1, out=tmp_path)
    results_folder(cfg, "cccc")
    try:
        results_folder(cfg, "cccc")  # the same id in the same second: refused, not reused
    except FileExistsError:
        return
    # The second call fell into the next second: a different folder, which is fine too.
    assert len(list(tmp_path.iterdir())) == 2
