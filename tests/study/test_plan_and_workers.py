"""The study folder's plan and its workers: what is planned, refused and extended; every step done once, in
order, by workers that share nothing but the plan; a dead worker's step taken over; failures recorded."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from bgbias.errors import OptionError, RecordError
from bgbias.study import worker as worker_module
from bgbias.study.ledger import Claim, machine_id, read_plan, update_plan, with_step
from bgbias.study.local import local_slots
from bgbias.study.pipeline import plan_study, slurm_stages, study_result
from bgbias.study.plan import study_plan
from bgbias.study.spec import bench_spec, dataset_spec
from bgbias.study.status import format_status
from bgbias.study.worker import Timing, needed_steps, work
from tests.replicas import make_cub

FAST = Timing(renew_every=0.05, stale_after=0.5, poll_every=0.02)


def _spec(tmp_path: Path, masks: str = "ground-truth"):
    return bench_spec("small", 0.9, 0, masks, backgrounds=tmp_path / "pools")


def _recording(calls: list[str], fail: set[str] = frozenset(), pause: float = 0.0):
    """A stand-in for executing a step: records it, fails the ones named."""
    def execute(folder, plan, step_id, device, processes, log):
        calls.append(step_id)
        time.sleep(pause)
        if step_id in fail:
            raise RuntimeError(f"{step_id} broke")
        return {"step": step_id}
    return execute


def test_a_new_plan_lists_prepare_masks_runs_and_page_in_order(tmp_path):
    spec = _spec(tmp_path, masks="u2netp")
    goals = plan_study(tmp_path, spec, study_plan("quick", seeds=2, masks="u2netp"))
    plan = read_plan(tmp_path)
    assert goals == ["page/report-multi_similarity-2seeds"]
    assert list(plan.steps) == [
        "prepare", "masks-1of1",
        "run/multi_similarity-seed0", "run/multi_similarity-bgaugment-seed0",
        "run/multi_similarity-seed1", "run/multi_similarity-bgaugment-seed1",
        "page/report-multi_similarity-2seeds"]
    assert plan.steps["run/multi_similarity-seed1"].needs == ["prepare", "masks-1of1"]
    assert plan.steps[goals[0]].needs == [step for step in plan.steps if step.startswith("run/")]
    assert needed_steps(plan, goals) == list(plan.steps)


def test_the_same_command_again_keeps_the_plan_and_other_work_needs_extend(tmp_path):
    spec = _spec(tmp_path)
    plan_study(tmp_path, spec, study_plan("quick"))
    before = (tmp_path / "plan.json").read_bytes()
    plan_study(tmp_path, spec, study_plan("quick"))
    assert (tmp_path / "plan.json").read_bytes() == before
    with pytest.raises(OptionError, match="lacks 3 step") as refused:
        plan_study(tmp_path, spec, study_plan("quick", seeds=2))
    assert "--extend" in refused.value.fix
    assert (tmp_path / "plan.json").read_bytes() == before
    plan_study(tmp_path, spec, study_plan("quick", seeds=2), extend=True)
    assert "run/multi_similarity-bgaugment-seed1" in read_plan(tmp_path).steps
    # A subset of the plan (its own page) needs no extension.
    plan_study(tmp_path, spec, study_plan("quick", seeds=1, methods=["multi_similarity"]))


def test_a_folder_holds_one_study(tmp_path):
    plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    other = bench_spec("small", 0.5, 0, "ground-truth", backgrounds=tmp_path / "pools")
    settings = r"bench's settings small, rho 0\.9, seed 0 there, small, rho 0\.5, seed 0 in this command"
    with pytest.raises(OptionError, match=rf"a study of bench small, rho 0\.9.*: the {settings}") as error:
        plan_study(tmp_path, other, study_plan("quick"), extend=True)
    assert "--out" in error.value.fix and "--rho 0.9" in error.value.fix


def test_a_damaged_plan_is_an_error_naming_the_file(tmp_path):
    plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    data = json.loads((tmp_path / "plan.json").read_text())
    data["steps"]["prepare"]["state"] = "finished"
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"steps\.prepare\.state") as error:
        read_plan(tmp_path)
    assert error.value.path == str(tmp_path / "plan.json") and "remove it" in error.value.fix


def _tampered_plan(tmp_path: Path, change) -> Path:
    plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    data = json.loads((tmp_path / "plan.json").read_text())
    change(data)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    return tmp_path / "plan.json"


def _page_to(folder: str):
    def change(data):
        data["steps"]["page/report"]["page"]["folder"] = folder
    return change


def _renamed_page(data):
    data["steps"]["page/../../elsewhere"] = data["steps"].pop("page/report")
    data["steps"]["page/../../elsewhere"]["page"]["folder"] = "../../elsewhere"


def _run_method(data):
    data["steps"]["run/multi_similarity-seed0"]["run"]["method"] = "../../multi_similarity"


@pytest.mark.parametrize(("change", "says"), [
    (_page_to("../../elsewhere"), "page/report"),
    (_page_to("/tmp/elsewhere"), "page/report"),
    (_page_to("other"), "page/report"),
    (_renamed_page, "page/../../elsewhere"),
    (_run_method, "run/multi_similarity-seed0"),
])
def test_a_plan_whose_step_leads_out_of_the_study_folder_is_refused_naming_the_step(tmp_path, change, says):
    """A tampered plan.json once made the study write its page outside the study folder, and exit 0."""
    path = _tampered_plan(tmp_path, change)
    with pytest.raises(RecordError, match=r"outside the study folder|does not match") as error:
        read_plan(tmp_path)
    assert error.value.path == str(path) and says in error.value.problem
    with pytest.raises(RecordError):
        plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))


def test_a_worker_does_every_step_once_in_order_and_records_it(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    goals = plan_study(tmp_path, _spec(tmp_path, "u2netp"), study_plan("quick", masks="u2netp"))
    outcome = work(tmp_path, goals, device="cpu", log=lambda _: None, timing=FAST)
    plan = read_plan(tmp_path)
    assert calls == list(plan.steps) == outcome.done
    assert all(step.state == "done" and step.claim is None and step.inputs == {"step": step_id}
               and step.device == "cpu" and step.attempts == 1 for step_id, step in plan.steps.items())
    assert work(tmp_path, goals, device="cpu", log=lambda _: None, timing=FAST).done == []


def test_a_run_whose_plan_is_extended_while_it_runs_is_done_again_as_the_plan_now_asks(tmp_path, monkeypatch):
    """``--extend`` (a profile, second masks) changes a running step's arguments: what the worker ran with the
    old ones is not recorded as the new step done."""
    step_id = "run/multi_similarity-seed0"
    ran_with: list[bool] = []
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))

    def execute(folder, plan, step, device, processes, log):
        if step == step_id:
            ran_with.append(plan.steps[step].run.profile)
            if len(ran_with) == 1:  # the extension lands while the run is running
                update_plan(folder, lambda current: with_step(current, step, run=current.steps[step].run
                                                              .model_copy(update={"profile": True})))
        return {"step": step}

    monkeypatch.setattr(worker_module, "execute_step", execute)
    lines: list[str] = []
    outcome = work(tmp_path, goals, log=lines.append, timing=FAST)
    step = read_plan(tmp_path).steps[step_id]
    assert ran_with == [False, True]
    assert (step.state, step.run.profile, step.attempts) == ("done", True, 1)
    assert outcome.done.count(step_id) == 1
    assert any(line.startswith(f"[{step_id}] its plan changed while it ran") for line in lines)


def test_a_failed_run_is_recorded_and_the_page_names_it(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls, fail={"run/multi_similarity-seed0"}))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    outcome = work(tmp_path, goals, log=lambda _: None, timing=FAST)
    plan = read_plan(tmp_path)
    failed = plan.steps["run/multi_similarity-seed0"]
    assert failed.state == "failed" and failed.error == "RuntimeError: run/multi_similarity-seed0 broke"
    assert "Traceback" in failed.traceback
    assert outcome.failed == {"run/multi_similarity-seed0": failed.error}
    assert plan.steps[goals[0]].state == "done"  # the page of the other run
    result = study_result(tmp_path, goals)
    assert result.failures == {"multi_similarity-seed0": failed.error}
    assert [path.name for path in result.runs] == ["multi_similarity-bgaugment-seed0"]
    assert "failures (tracebacks in plan.json):\n- run/multi_similarity-seed0: RuntimeError" in format_status(
        tmp_path, plan)
    # The next command tries the failed run again, and only it and the page.
    calls.clear()
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    assert read_plan(tmp_path).steps["run/multi_similarity-seed0"].state == "pending"
    work(tmp_path, goals, log=lambda _: None, timing=FAST)
    assert calls == ["run/multi_similarity-seed0", goals[0]]  # the page is written again, with the run


def test_a_step_whose_need_failed_fails_without_running(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls, fail={"masks-1of1"}))
    goals = plan_study(tmp_path, _spec(tmp_path, "u2netp"), study_plan("quick", masks="u2netp"))
    work(tmp_path, goals, log=lambda _: None, timing=FAST)
    plan = read_plan(tmp_path)
    assert calls == ["prepare", "masks-1of1", goals[0]]
    assert plan.steps["run/multi_similarity-seed0"].error == "it needs masks-1of1, which failed"
    assert plan.steps[goals[0]].state == "done"  # the stand-in's page (the real one fails: no run is done)


@pytest.mark.slow
def test_workers_on_threads_share_the_plan_and_do_each_step_once(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls, pause=0.05))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick", seeds=3))
    threads = [threading.Thread(target=work, args=(tmp_path, goals),
                                kwargs={"log": lambda _: None, "timing": FAST}) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(calls) == sorted(read_plan(tmp_path).steps)
    assert calls[-1] == goals[0]  # the page comes once every run is finished


DEAD_PID = 2**22 + 7
"""A pid no process of this machine has (above the kernel's pid_max)."""


def _dead_claim() -> Claim:
    """A claim of this machine whose process is gone."""
    return Claim(token="x", host="here", machine=machine_id(), pid=DEAD_PID, started=1, device="cpu",
                 heartbeat=time.time())


def _claimed_by(tmp_path: Path, step_id: str, claim: Claim, attempts: int = 1) -> None:
    update_plan(tmp_path, lambda plan: with_step(plan, step_id, state="running", claim=claim,
                                                 attempts=attempts))


def test_a_step_whose_worker_died_is_taken_over(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    dead = _dead_claim()
    _claimed_by(tmp_path, "prepare", dead)
    lines: list[str] = []
    work(tmp_path, goals, log=lines.append, timing=FAST)
    assert calls[0] == "prepare" and read_plan(tmp_path).steps["prepare"].attempts == 2
    assert f"[prepare] its worker (pid {2**22 + 7} on here) died: taken over" in lines


@pytest.mark.slow
def test_a_claim_from_another_machine_goes_stale_when_it_is_not_renewed(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    elsewhere = Claim(token="x", host="node7", machine="another-boot-id", pid=os.getpid(), started=1,
                      device="cuda", heartbeat=time.time())
    _claimed_by(tmp_path, "prepare", elsewhere)
    started = time.monotonic()
    work(tmp_path, goals, log=lambda _: None, timing=FAST)
    assert time.monotonic() - started >= FAST.stale_after * 0.9
    assert calls[0] == "prepare"


def test_a_step_that_kills_its_worker_each_time_ends_failed(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    dead = _dead_claim()
    _claimed_by(tmp_path, "prepare", dead, attempts=3)
    work(tmp_path, goals, log=lambda _: None, timing=FAST)
    plan = read_plan(tmp_path)
    assert plan.steps["prepare"].state == "failed"
    assert "died in each of 3 starts" in plan.steps["prepare"].error
    assert calls == [goals[0]]  # every run needs prepare; the page is left with failures only
    assert plan.steps["run/multi_similarity-seed0"].error == "it needs prepare, which failed"


def test_only_does_its_step_then_the_page_when_it_was_the_last(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    work(tmp_path, goals, only="prepare", log=lambda _: None, timing=FAST)
    work(tmp_path, goals, only="run/multi_similarity-seed0", log=lambda _: None, timing=FAST)
    assert calls == ["prepare", "run/multi_similarity-seed0"]
    work(tmp_path, goals, only="run/multi_similarity-bgaugment-seed0", log=lambda _: None, timing=FAST)
    assert calls[2:] == ["run/multi_similarity-bgaugment-seed0", goals[0]]


def test_slurm_stages_group_what_is_left_by_kind(tmp_path, monkeypatch):
    goals = plan_study(tmp_path, _spec(tmp_path, "u2netp"), study_plan("quick", masks="u2netp"))
    plan = read_plan(tmp_path)
    runs = ["run/multi_similarity-seed0", "run/multi_similarity-bgaugment-seed0"]
    assert slurm_stages(plan, goals) == [["prepare"], ["masks-1of1"], runs]
    for step_id in list(plan.steps)[:-1]:
        plan = with_step(plan, step_id, state="done")
    assert slurm_stages(plan, goals) == [[goals[0]]]


def test_devices_and_workers_make_the_slots(monkeypatch):
    assert [(slot.device, slot.gpus) for slot in local_slots("cpu", 2)] == [("cpu", None)] * 2
    assert local_slots("cpu")[0].threads is None  # one worker keeps torch's own threads
    assert [slot.threads for slot in local_slots("cpu", 2, threads=1)] == [1, 1]  # as one worker with 1
    assert local_slots("cpu", threads=3)[0].threads == 3
    with pytest.raises(OptionError, match="threads=0 is less than 1") as raised:  # in Python's words
        local_slots("cpu", threads=0)
    assert raised.value.render({}).startswith("--threads 0 is less than 1")  # the command line's
    with pytest.raises(OptionError, match="pass gpus_per_run=1 or more"):
        local_slots("cpu", gpus_per_run=0)
    _cuda(monkeypatch, 4)
    assert [slot.gpus for slot in local_slots("cuda:0,cuda:3")] == ["0", "3"]
    pairs = local_slots("cuda:0,cuda:1,cuda:2,cuda:3", gpus_per_run=2)
    assert [slot.gpus for slot in pairs] == ["0,1", "2,3"]
    with pytest.raises(OptionError, match="cannot be split into groups of 2"):
        local_slots("cuda:0,cuda:1,cuda:2", gpus_per_run=2)
    with pytest.raises(OptionError, match="--devices 'gpu0'"):
        local_slots("gpu0")
    with pytest.raises(OptionError, match="--workers sets CPU workers"):
        local_slots("cuda:0", workers=2)


def test_a_real_dataset_s_spec_names_its_masks_and_refuses_a_missing_folder(tmp_path):
    root = make_cub(tmp_path / "cub", n_classes=4, per_class=1)
    spec = dataset_spec("cub", root, None, tmp_path / "pools")
    assert (spec.masks, spec.root) == ("u2netp", str(root))
    assert Path(spec.masks_dir).name.startswith("cub-u2netp-cub-")
    assert dataset_spec("cub", root, str(tmp_path), None).masks == "folder"
    with pytest.raises(OptionError, match="neither a U²-Net model"):
        dataset_spec("cub", root, str(tmp_path / "nowhere"), None)
    with pytest.raises(OptionError, match="not at"):
        dataset_spec("cub", tmp_path / "none", None, None)
    with pytest.raises(OptionError, match="exact masks exist for the bench only"):
        dataset_spec("cub", root, "ground-truth", None)


def test_slurm_arrays_of_the_real_worker_do_each_step_once_and_the_last_run_writes_the_page(
        tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    from bgbias.study.slurm import SlurmOptions, submit_study

    calls: list[str] = []
    monkeypatch.setattr(worker_module, "execute_step", _recording(calls))
    goals = plan_study(tmp_path, _spec(tmp_path, "u2netp"), study_plan("quick", seeds=2, masks="u2netp"))
    stages = slurm_stages(read_plan(tmp_path), goals)
    jobs = submit_study(tmp_path, goals, stages, SlurmOptions(),
                        executor=submitit.DebugExecutor(tmp_path / "slurm" / "%j"))
    for job in jobs:
        job.result()
    plan = read_plan(tmp_path)
    assert len(jobs) == 6 and sorted(calls) == sorted(plan.steps) and calls[-1] == goals[0]
    assert {step.state for step in plan.steps.values()} == {"done"}


def test_a_rerun_with_other_explain_images_is_refused_naming_both_values(tmp_path):
    spec = _spec(tmp_path)
    plan_study(tmp_path, spec, study_plan("quick", explain_images=2))
    before = (tmp_path / "plan.json").read_bytes()
    for extend in (False, True):
        with pytest.raises(OptionError, match=r"--explain-images 2 .* not 3") as refused:
            plan_study(tmp_path, spec, study_plan("quick", explain_images=3), extend=extend)
        assert "--explain-images 2" in refused.value.fix and "--out DIR" in refused.value.fix
    assert (tmp_path / "plan.json").read_bytes() == before


def test_a_run_planned_without_watching_the_test_split_is_not_silently_kept_for_one_that_watches(tmp_path):
    spec = _spec(tmp_path)
    plan_study(tmp_path, spec, study_plan("quick"))
    watched = study_plan("full", methods=["multi_similarity"], seeds=1, masks="ground-truth")
    with pytest.raises(OptionError, match="does not watch the test split") as refused:
        plan_study(tmp_path, spec, watched, extend=True)
    assert "--out DIR" in refused.value.fix
    # The other way round is a subset of what the plan measures: kept.
    other = tmp_path / "other"
    other.mkdir()
    plan_study(other, spec, watched)
    plan_study(other, spec, study_plan("quick"))


def test_a_folder_of_other_pools_is_refused_naming_the_pools(tmp_path):
    plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    elsewhere = bench_spec("small", 0.9, 0, "ground-truth", backgrounds=tmp_path / "other-pools")
    with pytest.raises(OptionError, match="background pools") as refused:
        plan_study(tmp_path, elsewhere, study_plan("quick"), extend=True)
    said = f"pools {tmp_path / 'pools'} there, {tmp_path / 'other-pools'} in this command"
    assert said in str(refused.value)
    assert f"--backgrounds {tmp_path / 'pools'}" in refused.value.fix


def _cuda(monkeypatch, count: int) -> None:
    """This machine as one with ``count`` GPUs (none: no CUDA) for the checks of the devices named."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_devices_this_machine_lacks_are_refused_up_front_naming_devices(monkeypatch):
    _cuda(monkeypatch, 0)
    with pytest.raises(OptionError, match="--devices cuda:0,cuda:1: CUDA is not available") as refused:
        local_slots("cuda:0,cuda:1")
    assert "--devices cpu" in refused.value.fix
    _cuda(monkeypatch, 2)
    with pytest.raises(OptionError, match=r"--devices cuda:9: there is no cuda:9 .*2 GPUs") as refused:
        local_slots("cuda:9")
    assert "--devices cuda:0,cuda:1" in refused.value.fix and "--device " not in refused.value.fix
    assert [slot.gpus for slot in local_slots("cuda:1")] == ["1"]


def test_a_study_on_missing_devices_leaves_no_plan_behind(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from bgbias.cli import main

    _cuda(monkeypatch, 0)
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    result = CliRunner().invoke(main, ["study", "--devices", "cuda:9", "--out", str(tmp_path / "study")])
    assert result.exit_code == 2 and "--devices cuda:9" in result.output
    assert not (tmp_path / "study").exists()


@pytest.mark.slow
def test_a_worker_that_cannot_start_on_its_device_is_recorded_and_not_restarted(tmp_path, monkeypatch):
    import torch

    from bgbias.errors import BgbiasError
    from bgbias.study.local import Slot, run_local

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA, where a CUDA worker cannot start")
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick"))
    lines: list[str] = []
    with pytest.raises(BgbiasError, match="no worker could start") as error:
        run_local(tmp_path, goals, [Slot("cuda", "0"), Slot("cuda", "1")], log=lines.append, timing=FAST)
    assert "CUDA is not available" in str(error.value)
    assert not any("started again" in line for line in lines)
    plan = read_plan(tmp_path)
    assert sorted(worker.device for worker in plan.unstarted) == ["cuda (GPU 0)", "cuda (GPU 1)"]
    status = format_status(tmp_path, plan)
    assert "workers that could not start" in status and "cuda (GPU 1)" in status
    assert "CUDA is not available" in status
    # A worker that starts on that device later clears its record, and only its own.
    monkeypatch.setattr(worker_module, "execute_step", _recording([]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(worker_module, "resolve_device", lambda device: "cuda:0")
    work(tmp_path, goals, device="cuda", log=lambda _: None, timing=FAST)
    assert [worker.device for worker in read_plan(tmp_path).unstarted] == ["cuda (GPU 0)"]


@pytest.mark.slow
def test_the_study_says_what_is_left_and_the_runs_time_left_as_it_goes(tmp_path, monkeypatch):
    from bgbias.study.pipeline import steps_left

    monkeypatch.setattr(worker_module, "execute_step", _recording([], pause=0.05))
    goals = plan_study(tmp_path, _spec(tmp_path), study_plan("quick", seeds=2))
    said = steps_left(tmp_path, goals)
    assert said.startswith("6 of 6 steps to do, 4 of them runs") and "--dry-run" in said
    lines: list[str] = []
    work(tmp_path, goals, log=lines.append, timing=FAST)
    progress = [line for line in lines if line.startswith("runs: ")]
    assert len(progress) == 4
    assert re.fullmatch(r"runs: 1 of 4 finished \(1 timed, 0m00s each\); about 0m00s of run time left for 3 "
                        r"more", progress[0])
    assert progress[-1].startswith("runs: 4 of 4 finished (4 timed")
    assert "; runs: 4 of 4 finished" in format_status(tmp_path, read_plan(tmp_path)).splitlines()[0]
