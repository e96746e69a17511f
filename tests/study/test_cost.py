"""The dry run's cost: planned work times timed rates, each distinct configuration timed once, a trained
run's measurement alone, the U²-Net masks timed or refused clearly, and a real timing that leaves nothing
behind."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import tempfile
import threading
from pathlib import Path

import pytest

from bgbias.errors import AssetError
from bgbias.options import EXPLAIN_IMAGES
from bgbias.study.cost import (
    PREPARE_SECONDS,
    PlanCost,
    PlannedWork,
    RunCost,
    SplitSizes,
    estimate_masks,
    estimate_prepare,
    estimate_runs,
    planned_work,
    run_seconds,
    split_sizes,
)
from bgbias.study.cost_timing import ConfigTiming, MeasureTiming, time_config
from bgbias.study.plan import StudyRun
from bgbias.study.runs import REPEATS
from bgbias.study.spec import StudySpec, bench_spec
from tests.conftest import tiny_config

SMALL = ("data.batch_size=8", "data.m_per_class=2")
"""Settings that fit a batch into the tiny bench's 4 training classes."""

FAKE = ConfigTiming(setup=2.0, train_batch=0.5, epoch_overhead=1.0, epoch_start=0.0,
                    clean_image=0.01, corrupted_image=0.02,
                    measure=MeasureTiming(evaluation_overhead=3.0, attribution_images=(0.25,),
                                          explain_overhead=4.0))


def _spec(tiny_bench: Path) -> StudySpec:
    return StudySpec(dataset="bench", root=str(tiny_bench / "bench"), masks="folder",
                     masks_dir=str(tiny_bench / "masks"), backgrounds=str(tiny_bench / "backgrounds"))


def test_the_planned_work_counts_epochs_batches_validation_evaluation_and_attribution():
    config = tiny_config(Path("/nowhere"), epochs=3)
    sizes = SplitSizes(train_classes=(4, 4, 4, 4), val=10, test=300)
    work = planned_work(config, sizes, profile=False)
    # 16 images of 4 classes in chunks of m=2: 8 chunks, 4 classes a batch → 2 batches a pass.
    assert work == PlannedWork(epochs=3, batches=2, train_images=16, validations=4, validation_clean=10,
                               validation_corrupted=0, evaluation_clean=300,
                               evaluation_corrupted=REPEATS * 300, attributed=EXPLAIN_IMAGES)
    bgaugment = tiny_config(Path("/nowhere"), "triplet", "bgaugment.enabled=true",
                            "schedule.watch_test=true", "schedule.validate_untrained=false",
                            "data.batches_per_epoch=7", epochs=3)
    work = planned_work(bgaugment, SplitSizes((4, 4, 4, 4), 10, 30), profile=True)
    # Validation: val clean and corrupted (selecting on it), the watched test split clean and corrupted.
    counted = (work.batches, work.validations, work.validation_clean, work.validation_corrupted)
    assert counted == (7, 3, 40, 40)
    # The profile adds 5 fixed variant sets (the paste control among them) and 2 drawn ones per repeat.
    assert work.evaluation_corrupted == (REPEATS + 5 + 2 * REPEATS) * 30
    assert work.attributed == 30


def test_a_run_costs_its_planned_work_at_the_timed_rates():
    work = PlannedWork(epochs=3, batches=10, train_images=300, validations=4, validation_clean=100,
                       validation_corrupted=50, evaluation_clean=200, evaluation_corrupted=1000,
                       attributed=20)
    train, measure = run_seconds(work, FAKE)
    assert train == pytest.approx(2.0 + 3 * (10 * 0.5 + 1.0) + 4 * (100 * 0.01 + 50 * 0.02))
    # A method that re-learns something over the training split before some epochs (DCML's environments).
    hooked = dataclasses.replace(FAKE, epoch_start=0.002)
    assert run_seconds(work, hooked)[0] == pytest.approx(train + 300 * 0.002)
    assert measure == pytest.approx(200 * 0.01 + 1000 * 0.02 + 3.0 + 20 * 0.25 + 4.0)
    own = dataclasses.replace(FAKE, measure=dataclasses.replace(FAKE.measure, attribution_images=(0.25, 1.0)))
    assert run_seconds(work, own)[1] == pytest.approx(measure + 20 * 1.0)


def test_each_distinct_configuration_is_timed_once(tiny_bench):
    timed = []

    def fake_timer(config, device, **options):
        timed.append((config.bgaugment.enabled, config.seed, options["attributions"], options["measure"]))
        return FAKE

    runs = [StudyRun("triplet", bgaugment, seed, settings=SMALL)
            for seed in (0, 1) for bgaugment in (False, True)]
    runs.append(StudyRun("triplet", False, 2, watch_test=True, settings=SMALL))
    costs = estimate_runs(_spec(tiny_bench), runs, profile=False, device="cpu", timer=fake_timer)
    # Seeds and the schedule draw other batches of the same cost; BGAugment composites: a configuration of
    # its own.
    # Measuring does not depend on BGAugment: the twin reuses the first one's.
    assert timed == [(False, 0, ("smoothgrad",), None), (True, 0, ("smoothgrad",), FAKE.measure)]
    assert set(costs) == {run.folder_name for run in runs}
    vanilla, bgaugment = costs["triplet-data.batch_size-8-data.m_per_class-2-seed0"], \
        costs["triplet-data.batch_size-8-data.m_per_class-2-bgaugment-seed0"]
    assert bgaugment.train > vanilla.train  # it also validates on the corrupted set
    assert bgaugment.measure == vanilla.measure


def test_a_method_with_its_own_attribution_is_timed_with_it(tiny_bench):
    timed = []

    def fake_timer(config, device, **options):
        timed.append(options["attributions"])
        return FAKE

    estimate_runs(_spec(tiny_bench), [StudyRun("sam", False, 0, settings=SMALL)], profile=False, device="cpu",
                  timer=fake_timer)
    assert timed == [("smoothgrad", "sam")]


def test_a_run_whose_training_finished_costs_its_measurement_alone(tiny_bench):
    runs = [StudyRun("triplet", False, 0, settings=SMALL), StudyRun("triplet", False, 1, settings=SMALL)]
    costs = estimate_runs(_spec(tiny_bench), runs, profile=False, device="cpu", timer=lambda *_, **__: FAKE,
                          trained=[runs[0].folder_name])
    trained, fresh = costs[runs[0].folder_name], costs[runs[1].folder_name]
    assert trained == RunCost(0.0, fresh.measure) and fresh.train > 0


@pytest.mark.slow
def test_a_bench_still_to_build_is_counted_from_its_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    sizes = split_sizes(bench_spec("small", 0.9, 0, "ground-truth", backgrounds=tmp_path))
    # 248 stamps: 40 % train, 20 % val, the rest test, 8 views each.
    assert (sum(sizes.train_classes), len(sizes.train_classes), sizes.val, sizes.test) == (792, 99, 400, 792)


@pytest.mark.slow
def test_prepare_costs_what_is_still_to_make(tiny_bench, tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    fresh = bench_spec("small", 0.9, 0, "ground-truth", backgrounds=tmp_path / "no-pools")
    pooled = bench_spec("small", 0.9, 0, "ground-truth", backgrounds=tiny_bench / "backgrounds")
    assert estimate_prepare(fresh, done=True) == 0.0
    seconds = estimate_prepare(fresh, done=False)
    # The pools and a bench of 1,984 images still to make, on top of the assets.
    assert estimate_prepare(pooled, done=False) < seconds
    assert estimate_prepare(pooled, done=False) > 1984 * PREPARE_SECONDS["bench per image"]
    # A real dataset with its pools: its layout's check takes seconds.
    assert estimate_prepare(_spec(tiny_bench), done=False) == 0.0


def test_a_missing_u2net_model_is_the_masks_command_s_error(tiny_bench, tmp_path, monkeypatch):
    for name in ("U2NET_HOME", "BGBIAS_HOME", "HOME"):
        monkeypatch.setenv(name, str(tmp_path / name))
    spec = StudySpec(**{**_spec(tiny_bench).model_dump(), "masks": "u2net"})
    with pytest.raises(AssetError, match=r"u2net\.onnx was not found") as raised:
        estimate_masks(spec, 100, device="cpu")
    assert "bgbias assets fetch u2net" in raised.value.fix
    assert estimate_masks(_spec(tiny_bench), 100, device="cpu") == 0.0  # masks given: nothing to make


@pytest.mark.slow  # the real u2netp network
def test_u2net_masks_are_timed_on_the_dataset_s_images(tiny_bench, tmp_path, monkeypatch):
    from tests.u2netp import provide_u2netp

    monkeypatch.setenv("U2NET_HOME", str(provide_u2netp(tmp_path / "home").parent))
    spec = StudySpec(**{**_spec(tiny_bench).model_dump(), "masks": "u2netp"})
    seconds = estimate_masks(spec, 1000, device="cpu")
    assert 1 < seconds < 1000 * 30  # U²-Net-p takes about 0.2 s an image on 2 CPU cores


def test_the_cost_table_gives_hours_per_method_the_steps_around_and_the_total():
    runs = [StudyRun("triplet", False, 0), StudyRun("triplet", True, 0), StudyRun("dcml", False, 0)]
    costs = {runs[0].folder_name: RunCost(600, 300), runs[1].folder_name: RunCost(900, 300),
             runs[2].folder_name: RunCost(7200, 1800)}
    table = PlanCost(runs, costs, prepare=20, masks=0, page=10, device="cpu").table().splitlines()
    assert table[0].startswith("cost on cpu (device-hours")
    triplet = next(line for line in table if line.startswith("triplet"))
    assert triplet.endswith("0.42 h (25.0 min)  0.17 h (10.0 min)  0.58 h (35.0 min)")
    dcml = next(line for line in table if line.startswith("dcml"))
    assert dcml.split() == ["dcml", "1", "2.00", "h", "0.50", "h", "(30.0", "min)", "2.50", "h"]
    assert table[-1].split()[:2] == ["total", "3"]
    assert f"{(2100 + 9000 + 30) / 3600:.2f} h" in table[-1]


def _time_tiny(tiny_bench: Path, *settings: str) -> ConfigTiming:
    return time_config(tiny_config(tiny_bench, "triplet", "bgaugment.enabled=true", *settings), "cpu",
                       image_size=(40, 40), backgrounds=tiny_bench / "backgrounds")


@pytest.mark.slow
def test_timing_a_configuration_needs_no_weight_file_writes_only_a_temporary_folder_and_leaves_nothing(
        tiny_bench, tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a command would write ./runs, ./corrupted
    temp = tmp_path_factory.mktemp("temp")  # this test's own: another worker's timing may run meanwhile
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    threads = threading.active_count()
    # Pretrained: tiny_cnn has no weights at all, as BN-Inception has none before it is downloaded (a dry
    # run before anything is); random weights cost the same steps. One loader worker: the training loader
    # keeps it between epochs (persistent workers), as on a GPU, and it must be gone after the timing (it
    # starts in about half a second on 2 cores: one timing checks both).
    timing = _time_tiny(tiny_bench, "model.pretrained=true", "data.workers=1")
    for value in (timing.setup, timing.train_batch, timing.clean_image, timing.corrupted_image,
                  *timing.measure.attribution_images):
        assert 0 < value < 60 and math.isfinite(value)
    measure = timing.measure
    assert min(timing.epoch_overhead, measure.evaluation_overhead, measure.explain_overhead) >= 0
    assert len(measure.attribution_images) == 1
    assert list(temp.glob("bgbias-*")) == []  # (torch may leave its compile cache there)
    assert list(tmp_path.iterdir()) == []
    assert multiprocessing.active_children() == []
    assert threading.active_count() == threads


@pytest.mark.slow
def test_the_stand_in_s_masks_have_the_upright_size_of_an_exif_rotated_image(tmp_path):
    from PIL import Image

    from bgbias.data.images import load_image, load_mask
    from bgbias.data.registry import open_dataset
    from bgbias.study.cost_timing import write_stand_in

    photo = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 32×24, upright 24×32
    Image.new("RGB", (32, 24), (90, 120, 150)).save(photo, exif=exif)
    stand_in = write_stand_in(tmp_path / "stand-in", tiny_config(Path("/nowhere")), [photo], (32, 24), None)
    item = open_dataset("bench", stand_in.root).items()[0]
    assert load_mask(item.ground_truth_mask).size == load_image(item.image).size == (24, 32)
