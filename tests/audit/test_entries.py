"""The audit's models as given: list-file lines and ``--model`` values, labels, folder names."""

from __future__ import annotations

import pytest

from bgbias.errors import OptionError
from bgbias.model_audit.entries import ModelEntry, check_labels, entries_of, parse_entry, read_list_file
from tests.docs_blocks import code_block


def test_a_list_file_gives_labels_specs_and_factory_arguments(tmp_path):
    listed = tmp_path / "models.txt"
    listed.write_text("# the offline encoders\n\n"
                      "mobilenet = bgbias.models.pretrained:imagenet_mobilenet_v2\n"
                      "runs/study/run-0   # a run folder, labelled by itself\n"
                      "'vit small' = timm:create_model model_name=vit_small pretrained=true num_classes=0\n")
    entries = read_list_file(listed, trust=True)
    assert [entry.label for entry in entries] == ["mobilenet", "runs/study/run-0", "vit small"]
    assert [entry.model for entry in entries] == ["bgbias.models.pretrained:imagenet_mobilenet_v2",
                                                  "runs/study/run-0", "timm:create_model"]
    assert entries[2].args == {"model_name": "vit_small", "pretrained": True, "num_classes": 0}
    assert entries[2].spec == "timm:create_model model_name=vit_small pretrained=true num_classes=0"
    assert entries[1].where == f"{listed}, line 4"


def test_the_list_file_of_docs_audit_reads_as_the_page_says(tmp_path):
    listed = tmp_path / "encoders.txt"
    listed.write_text(code_block("docs/audit.md", "audit-models-file").text, encoding="utf-8")
    entries = read_list_file(listed, trust=True)
    check_labels(entries)
    run = "runs/study/bench-small-rho0.9-seed0-ground-truth/multi_similarity-seed0"
    assert [entry.label for entry in entries] == ["ImageNet MobileNetV2", "ImageNet EfficientNet-Lite0",
                                                  "random MobileNetV2 (control)", "ViT-S/16", run]
    assert entries[3].model == "timm:create_model"
    assert entries[3].args == {"model_name": "vit_small_patch16_224", "pretrained": True, "num_classes": 0}
    assert entries[4].model == run


@pytest.mark.parametrize(("line", "says"), [
    ("mobilenet =", "line 2: no model spec"),
    ("mobilenet=model.pt", "line 2: no model spec"),
    ("model.pt dim", "line 2: a keyword argument of a factory is key=value"),
    ("'unclosed = model.pt", "line 2: No closing quotation"),
])
def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path, line, says):
    listed = tmp_path / "models.txt"
    listed.write_text(f"good = model.pt\n{line}\n")
    with pytest.raises(OptionError) as caught:
        read_list_file(listed)
    assert says in str(caught.value) and str(listed) in str(caught.value)
    assert "[LABEL =] SPEC [KEY=VALUE ...]" in str(caught.value)


@pytest.mark.parametrize("line", [
    'A = os:system command="touch {marker}"',
    "subprocess:getoutput cmd='touch {marker}'",
    "B = subprocess:Popen args='touch {marker}' shell=true",
])
def test_a_factory_in_a_list_file_is_refused_unread_unless_trusted(tmp_path, monkeypatch, line):
    """A list file may come from someone else: a factory it names is Python that bgbias would import and call,
    so it is refused before anything runs, naming the file, the line and the switch that trusts it."""
    import bgbias.api

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    listed = tmp_path / "models.txt"
    listed.write_text(f"ours = model.onnx\n{line.format(marker=marker)}\n")
    with pytest.raises(OptionError) as caught:
        read_list_file(listed)
    message = str(caught.value)
    assert "line 2" in message and str(listed) in message and "trust_model=True" in message
    with pytest.raises(OptionError, match="trust_model=True"):
        bgbias.api.audit("bench", [], models_file=listed, out=tmp_path / "audit")
    assert not marker.exists()
    assert len(read_list_file(listed, trust=True)) == 2
    assert not marker.exists()  # trusting reads the list; only loading a model calls its factory


def test_a_label_given_twice_names_both_places(tmp_path):
    listed = tmp_path / "models.txt"
    listed.write_text("a = first.pt\n")
    entries = [parse_entry("a = second.pt", "--model 'a = second.pt'"), *read_list_file(listed)]
    with pytest.raises(OptionError) as caught:
        check_labels(entries)
    message = str(caught.value)
    assert "the label 'a' is given twice" in message
    assert "--model 'a = second.pt' (second.pt)" in message and f"{listed}, line 1 (first.pt)" in message
    with pytest.raises(OptionError, match="no model to audit"):
        check_labels([])


def test_models_from_python_take_labels_from_a_mapping_or_their_class():
    from torch import nn

    module = nn.Linear(2, 2)
    entries = entries_of({"mine": module, "theirs": "model.onnx"})
    assert [(entry.label, entry.spec) for entry in entries] == [("mine", "<in memory: Linear>"),
                                                                ("theirs", "model.onnx")]
    assert [entry.label for entry in entries_of([module, "x.pt"])] == ["Linear", "x.pt"]


def test_a_models_folder_is_a_slug_and_a_digest_never_the_label():
    hostile = ModelEntry("../../etc/<script>alert(1)</script>", "model.pt", "model.pt", "--model")
    name = hostile.folder_name()
    assert "/" not in name and "<" not in name and not name.startswith(".")
    assert name.startswith("etc_script_alert_1_")
    other = ModelEntry(hostile.label, "other.pt", "other.pt", "--model")
    assert other.folder_name() != name and len(name.rsplit("-", 1)[1]) == 8


def test_the_command_runs_no_factory_of_an_untrusted_list_and_says_how_to_trust_it(tiny_bench, tmp_path):
    from click.testing import CliRunner

    from bgbias.cli import main

    marker = tmp_path / "ran"
    listed = tmp_path / "models.txt"
    listed.write_text(f'A = os:system command="touch {marker}"\n')
    result = CliRunner().invoke(main, ["audit", "--dataset", "bench", "--root", str(tiny_bench / "bench"),
                                       "--masks", str(tiny_bench / "masks"), "--backgrounds",
                                       str(tiny_bench / "backgrounds"), "--repeats", "2", "--device", "cpu",
                                       "--workers", "0", "--no-progress", "--models", str(listed), "--out",
                                       str(tmp_path / "audit")])
    assert result.exit_code == 2, result.output
    assert "names the factory os:system" in result.output and "--trust-model" in result.output
    assert not marker.exists()


def test_a_list_file_with_a_byte_order_mark_reads_its_first_line(tmp_path):
    listed = tmp_path / "models.txt"
    listed.write_text("mobilenet = bgbias.models.pretrained:imagenet_mobilenet_v2\n", encoding="utf-8-sig")
    assert [entry.label for entry in read_list_file(listed, trust=True)] == ["mobilenet"]


def test_an_audit_on_ones_own_images_scores_every_image_unless_a_model_is_a_run(tmp_path):
    import json
    from types import SimpleNamespace

    from bgbias.data.table import image_table
    from bgbias.model_audit.run import audit_split

    own = image_table([("a.png", 0), ("b.png", 1)], tmp_path)
    outside = [parse_entry("bgbias.models.pretrained:imagenet_mobilenet_v2", "--model")]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps({}))
    with_run = [*outside, parse_entry(f"mine = {tmp_path / 'run'}", "--model")]
    assert audit_split(own, outside, None)[0] == "all"
    assert audit_split(own, with_run, None) == (
        "test", "test, the held-out classes: the default on one's own images when a model is a run bgbias "
                "trained (mine)")
    assert audit_split(own, outside, "val") == ("val", "val, as asked")
    assert audit_split(SimpleNamespace(name="bench"), outside, None)[0] == "test"
