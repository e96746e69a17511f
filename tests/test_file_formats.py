"""Every file bgbias writes and reads back states its format at version 1 (bgbias.schema.check_format): one
written by a pre-release bgbias, or by another tool, is refused naming the file and the command that makes
it again, or, where bgbias remakes such a file anyway, is not used."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bgbias.attribution.outputs import read_summary
from bgbias.attribution.records import claim_out_dir as claim_explain_dir
from bgbias.attribution.records import read_results
from bgbias.backgrounds.pool import list_pool
from bgbias.corrupted.manifests import load_manifest
from bgbias.corrupted.render import claim_out_dir as claim_render_dir
from bgbias.engine.embedding_cache import EmbeddingCache
from bgbias.engine.external_model import read_model_record
from bgbias.engine.run_dir import RunDir, read_record
from bgbias.errors import RecordError
from bgbias.leakage_meter.calibration import dial_curves
from bgbias.model_audit.outcome import read_outcome
from bgbias.report.evaluation import load_evaluation_report
from bgbias.saliency.records import read_manifest as read_mask_manifest
from bgbias.schema import check_format, format_header
from bgbias.study.bench import built_bench
from bgbias.study.ledger import read_plan
from bgbias.variants.variant_manifests import load_variant_manifest

SHA = "0" * 64

# What files of pre-release versions stated: nothing, an integer format, a format past version 1, or another
# tool's identifier.
STATED = {
    "nothing": lambda identifier: {},
    "an integer format": lambda identifier: {"format": 1},
    "version 2": lambda identifier: {"format": identifier, "version": 2},
    "another tool": lambda identifier: {"format": "another-tool", "version": 1},
}


def _json(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _report(tmp, stated):
    path = _json(tmp / "report.json", stated("bgbias-eval-report"))
    return path, lambda: load_evaluation_report(path), "bgbias eval"


def _plan(tmp, stated):
    path = _json(tmp / "plan.json", stated("bgbias-study-plan"))
    return path, lambda: read_plan(tmp), "bgbias study"


def _model_record(tmp, stated):
    path = _json(tmp / "model.json", stated("bgbias-external-model"))
    return path, lambda: read_model_record(path), "bgbias eval --model"


def _audit_outcome(tmp, stated):
    path = _json(tmp / "audit-model.json", stated("bgbias-audit-model"))
    return path, lambda: read_outcome(tmp), "bgbias audit"


def _dial(tmp, stated):
    path = _json(tmp / "dial.json", {"curves": [], **stated("bgbias-leakage-dial")})

    def read():
        dial_curves.cache_clear()
        return dial_curves(path)
    return path, read, "leakage_dial.py"


def _corrupted_manifest(tmp, stated):
    header = stated("bgbias-corrupted-manifest")
    path = _json(tmp / "repeat-0.json", {"header": header, "images": []})
    return path, lambda: load_manifest(path, None), "bgbias corrupt"


def _variant_manifest(tmp, stated):
    header = stated("bgbias-variant-manifest")
    path = _json(tmp / "only-fg" / "repeat-0.json", {"header": header, "images": []})
    return path, lambda: load_variant_manifest(path, None), "bgbias corrupt"


def _render_ledger(tmp, stated):
    header = {"manifest_sha256": SHA, **stated("bgbias-corrupted-render")}
    path = _json(tmp / "render" / "render.jsonl", header)
    return path, lambda: claim_render_dir(path.parent, SHA, force=False), "--force"


def _explain_ledger(tmp, stated):
    settings = {"dataset": "bench", "attribution": "smoothgrad", "masks_dir": None}
    header = {"settings": settings, **stated("bgbias-explain-ledger")}
    path = _json(tmp / "explain" / "records.jsonl", header)
    return path, lambda: claim_explain_dir(path.parent, settings, force=False), "force=True"


def _explain_results(tmp, stated):
    path, _claim, _fix = _explain_ledger(tmp, stated)
    return path, lambda: read_results(path.parent), "bgbias explain"


def _explain_summary(tmp, stated):
    path = _json(tmp / "summary.json", stated("bgbias-explain-summary"))
    return path, lambda: read_summary(tmp), "bgbias explain"


def _mask_manifest(tmp, stated):
    path = _json(tmp / "manifest.json", {"settings": {}, **stated("bgbias-masks")})
    return path, lambda: read_mask_manifest(tmp), "bgbias masks"


def _pool_manifest(tmp, stated):
    (tmp / "train").mkdir()
    (tmp / "train" / "gen-0000.png").write_bytes(b"")
    path = _json(tmp / "manifest.json", {"images": [], **stated("bgbias-backgrounds")})
    return path, lambda: list_pool(tmp / "train"), "bgbias assets backgrounds"


KINDS = {
    "report.json": _report, "plan.json": _plan, "model.json": _model_record,
    "audit-model.json": _audit_outcome, "leakage dial": _dial, "corrupted-set manifest": _corrupted_manifest,
    "variant manifest": _variant_manifest,
    "render ledger": _render_ledger, "explain ledger (resumed)": _explain_ledger,
    "explain ledger (read)": _explain_results, "summary.json": _explain_summary,
    "mask manifest": _mask_manifest, "pool manifest": _pool_manifest,
}


@pytest.mark.parametrize("stated", STATED.values(), ids=STATED.keys())
@pytest.mark.parametrize("kind", KINDS.values(), ids=KINDS.keys())
def test_a_file_of_a_pre_release_bgbias_or_another_tool_is_refused_naming_it_and_the_command(
        tmp_path, kind, stated):
    path, read, command = kind(tmp_path, stated)
    with pytest.raises(RecordError, match="written by a pre-release bgbias") as err:
        read()
    assert err.value.path == str(path)
    assert command in err.value.fix


def test_the_check_wants_the_identifier_and_the_integer_version_1():
    check_format(format_header("demo"), "demo", path=None, what="a demo", fix="")
    for stated in ({"format": "demo", "version": True}, {"format": "demo", "version": 1.0}, ["demo", 1]):
        with pytest.raises(RecordError, match='not format "demo", version 1'):
            check_format(stated, "demo", path=None, what="a demo", fix="")


def test_files_bgbias_makes_again_anyway_are_not_used_when_of_a_pre_release_bgbias(tmp_path):
    run = tmp_path / "run"
    _json(run / "run.json", {"status": "finished", "best_epoch": 1, "monitor": "val_map_at_r"})
    assert read_record(RunDir(run)) is None  # treated as unfinished: resuming writes it again

    bench = tmp_path / "bench"
    _json(bench / "bench.json", {"format": "bgbias-bench/2", "parameters": {"preset": "small", "rho": 0.9,
                                                                            "seed": 0}, "summary": {}})
    assert built_bench(bench, preset="small", rho=0.9, seed=0) is None  # built again

    cache = EmbeddingCache(tmp_path / "cache")
    key = {"model": "m", "images": "i"}
    cache.save(key, {"embedding": np.ones((2, 3), dtype=np.float32)})
    stored = dict(np.load(cache.path(key)))
    stored["key"] = np.array(json.dumps({"cache_version": 3, **key}, sort_keys=True))
    np.savez(cache.path(key), **stored)
    assert cache.load(key) is None  # embedded again
