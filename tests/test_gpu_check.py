"""scripts/gpu_check.py, the one device check, on the CPU with --small (so it cannot rot between GPU runs):
its sections run and its record holds every table."""

from __future__ import annotations

import json

import pytest

from tests.scripts import load_script


def _check():
    return load_script("scripts/gpu_check.py")


def test_a_failing_section_is_recorded_and_the_check_goes_on(tmp_path, monkeypatch):
    check = _check()
    monkeypatch.setattr(check, "scoring", lambda scale, device: 1 / 0)
    record = tmp_path / "check.json"
    code = check.main(["--device", "cpu", "--small", "--sections", "scoring,embedding",
                       "--record", str(record)])
    written = json.loads(record.read_text(encoding="utf-8"))
    assert code == 1 and written["failures"] == {"scoring": "ZeroDivisionError: division by zero"}
    assert "embedding" in written["tables"]


def test_unknown_sections_and_a_missing_gpu_are_refused(capsys):
    check = _check()
    with pytest.raises(SystemExit):
        check.main(["--sections", "training,nonsense"])
    assert "unknown sections ['nonsense']" in capsys.readouterr().err
    if not check.torch.cuda.is_available():
        with pytest.raises(SystemExit):
            check.main(["--device", "cuda"])
        assert "sees no CUDA device" in capsys.readouterr().err


@pytest.mark.slow  # the CUDA-marked tests are collected from the whole suite, and u2netp makes masks
def test_the_whole_small_check_runs_on_the_cpu(tmp_path, monkeypatch):
    from bgbias.methods.registry import method_names
    from tests.u2netp import provide_u2netp

    monkeypatch.setenv("U2NET_HOME", str(provide_u2netp(tmp_path / "home").parent))
    record = tmp_path / "check.json"
    code = _check().main(["--device", "cpu", "--small", "--record", str(record)])
    written = json.loads(record.read_text(encoding="utf-8"))
    assert code == 0, written["failures"]
    assert set(written["tables"]) == {"tests", "training", "embedding", "masks", "scoring"}
    assert "skipped" in written["tables"]["tests"]["rows"][0][1]
    training = written["tables"]["training"]["rows"]
    assert [(row[0], row[1]) for row in training] == [(setting, method) for setting in ("bench", "paper")
                                                      for method in method_names()]
    assert all(float(row[2]) > 0 and float(row[3]) > 0 and row[7] == "float32, channels_last"
               for row in training)
    assert [row[0] for row in written["tables"]["embedding"]["rows"]] == ["bench", "paper"]
    assert written["tables"]["scoring"]["rows"][0][0] == "4,000"
    assert written["machine"]["torch"]
    assert written["source"]["command"].startswith("python scripts/gpu_check.py")
    assert written["tables"]["masks"]["rows"][1][0].startswith("bgbias's default (onnxruntime, batch 1")
