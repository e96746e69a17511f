"""`bgbias study --executor slurm`: the options, the submission it prints, and the job arrays run through
submitit's own debug and local executors with stand-ins of the worker (tests/study/standins.py). No SLURM
cluster is needed, nor used: sbatch and srun are never called."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from bgbias.errors import OptionError
from bgbias.signals import Terminated
from bgbias.study.slurm import (
    SLURM_FOLDER,
    SUBMITTED,
    SlurmOptions,
    StudyTask,
    checked_options,
    parse_slurm_opts,
    parse_time,
    preemption_signal,
    slurm_executor,
    slurm_options,
    slurm_parameters,
    submission_text,
    submit_study,
)
from tests.study import standins

submitit = pytest.importorskip("submitit")

ROOT = Path(__file__).resolve().parents[2]
STAGES = [["masks-1of2", "masks-2of2"],
          ["run/multi_similarity-seed0", "run/multi_similarity-bgaugment-seed0"]]
GOALS = ("page/report",)


# --- options ---------------------------------------------------------------------------------------------


def test_parameters_of_the_defaults_and_of_every_option():
    assert slurm_parameters(SlurmOptions()) == {"job_name": "bgbias-study", "time": 1440, "gpus_per_task": 1}
    options = slurm_options(partition="gpu", time="12:00:00", gpus_per_task="2", cpus_per_task="10",
                            array_parallelism="8", opts=["qos=high", "mail-type=END"])
    assert slurm_parameters(options) == {
        "job_name": "bgbias-study", "time": 720, "gpus_per_task": 2, "partition": "gpu", "cpus_per_task": 10,
        "array_parallelism": 8, "qos": "high", "mail_type": "END"}


@pytest.mark.parametrize(("text", "minutes"), [("90", 90), ("1:30:00", 90), ("36:00:00", 2160),
                                                ("0:00:30", 1), ("00:01:01", 2)])
def test_time_in_minutes_or_hours_minutes_seconds(text, minutes):
    assert parse_time(text) == minutes


@pytest.mark.parametrize("text", ["1h", "0", "0:00:00", "1:60:00", "", "-5"])
def test_a_time_that_is_not_one_is_refused_by_name(text):
    with pytest.raises(OptionError, match="--slurm-time") as caught:
        parse_time(text)
    assert "12:00:00" in caught.value.fix


@pytest.mark.parametrize(("option", "argument"), [("--slurm-gpus-per-task", "gpus_per_task"),
                                                  ("--slurm-cpus-per-task", "cpus_per_task"),
                                                  ("--slurm-array-parallelism", "array_parallelism")])
def test_a_count_that_is_not_one_is_refused_by_name(option, argument):
    with pytest.raises(OptionError, match=option):
        slurm_options(**{argument: "-1"})
    with pytest.raises(OptionError, match=option):
        slurm_options(**{argument: "two"})


def test_no_gpus_is_a_count_but_no_cpus_is_not():
    assert slurm_options(gpus_per_task="0").gpus_per_task == 0
    with pytest.raises(OptionError, match="--slurm-cpus-per-task"):
        slurm_options(cpus_per_task="0")


def test_slurm_opt_takes_whole_numbers_flags_and_text():
    assert parse_slurm_opts(["qos=high", "mem=64G", "mail-type=END", "signal_delay_s=120", "exclusive=true",
                             "use_srun=False", "account = dml"]) == {
        "qos": "high", "mem": "64G", "mail_type": "END", "signal_delay_s": 120, "exclusive": True,
        "use_srun": False, "account": "dml"}


@pytest.mark.parametrize(("opt", "message", "fix"), [
    ("qos", "takes key=value", "qos=high"),
    ("=high", "takes key=value", "qos=high"),
    ("partition=gpu", "option of its own", "--slurm-partition"),
    ("time=60", "option of its own", "--slurm-time"),
    ("job-name=mine", "cannot set job_name", "qos"),
    ("nodes=2", "one process on one node", "qos"),
    ("dependency=afterok:1", "cannot set dependency", "qos"),
    ("qos=", "no value", "qos=VALUE"),
])
def test_slurm_opt_refuses_what_submitit_or_the_study_does_not_take(opt, message, fix):
    with pytest.raises(OptionError, match=message) as caught:
        parse_slurm_opts([opt])
    assert "--slurm-opt" in caught.value.problem
    assert fix in caught.value.fix


@pytest.mark.parametrize(("given", "option"), [
    ({"partition": "gpu\n#SBATCH --output=/tmp/elsewhere"}, "--slurm-partition"),
    ({"partition": "gpu\r"}, "--slurm-partition"),
    ({"opts": ["mem=4G\ntouch X\n#"]}, "--slurm-opt mem"),
    ({"opts": ["comment=a\x00b"]}, "--slurm-opt comment"),
    ({"opts": ["account=dml\x85x"]}, "--slurm-opt account"),
])
def test_a_control_character_in_a_value_of_the_script_is_refused_by_name(given, option):
    """shlex.quote keeps a newline as it is, so it would start a line (a command, an #SBATCH directive) of
    the batch script submitit writes."""
    with pytest.raises(OptionError, match="control character") as caught:
        slurm_options(**given)
    assert option in caught.value.problem


def test_options_made_in_python_and_the_study_folder_are_checked_before_the_script_too(tmp_path):
    with pytest.raises(OptionError, match="control character"):
        slurm_parameters(SlurmOptions(partition="gpu\nhostname"))
    with pytest.raises(OptionError, match="--slurm-opt qos"):
        slurm_parameters(SlurmOptions(extra={"qos": "high\nhostname"}))
    folder = tmp_path / "study\n#SBATCH --output=x"
    with pytest.raises(OptionError, match="control character") as caught:
        submission_text(folder, STAGES, SlurmOptions())
    assert caught.value.path == str(folder)
    with pytest.raises(OptionError, match="control character"):
        submit_study(folder, GOALS, STAGES, SlurmOptions(), executor=submitit.DebugExecutor(tmp_path / "x"))
    assert not folder.exists()


@pytest.mark.parametrize("opt", ["reservation=x", "mem_gb=64", "timeout-min=60"])
def test_a_slurm_opt_submitit_refuses_is_refused_by_name(opt):
    """submitit's own update_parameters says which names it takes (mem_gb and timeout_min are its
    executor-independent names, which SlurmExecutor refuses)."""
    key = opt.split("=")[0].replace("-", "_")
    refused = f"--slurm-opt {key}: submitit knows no such SLURM parameter"
    with pytest.raises(OptionError, match=refused) as caught:
        slurm_options(opts=[opt])
    assert "qos" in caught.value.fix and "mem" in caught.value.fix
    assert "partition" not in caught.value.fix and "dependency" not in caught.value.fix
    with pytest.raises(OptionError, match=f"--slurm-opt {key}"):  # options made in Python
        checked_options(SlurmOptions(extra={key: "x"}))


def test_a_slurm_opt_given_twice_is_refused():
    with pytest.raises(OptionError, match="qos is given twice"):
        parse_slurm_opts(["qos=high", "qos=low"])


def test_without_submitit_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` raises ImportError
    with pytest.raises(OptionError, match="needs submitit") as caught:
        slurm_options(opts=["qos=high"])
    assert caught.value.fix == "install it with: pip install 'bgbias[slurm]'"
    with pytest.raises(OptionError, match="needs submitit"):
        submission_text(Path("study"), STAGES, SlurmOptions())


@pytest.mark.skipif(shutil.which("srun") is not None, reason="SLURM is installed here")
def test_without_slurm_submitting_says_to_use_a_login_node_or_the_dry_run(tmp_path):
    with pytest.raises(OptionError, match="srun") as caught:
        slurm_executor(tmp_path, SlurmOptions())
    assert "--dry-run" in caught.value.fix


# --- the dry run's submission ----------------------------------------------------------------------------


def test_the_submission_text_has_each_arrays_steps_and_sbatch_lines(tmp_path):
    options = slurm_options(partition="gpu", time="720", gpus_per_task="2", array_parallelism="1",
                            opts=["qos=high"])
    text = submission_text(tmp_path, [[], *STAGES, ["run/one-more"]], options)
    arrays = text.split("\n\n")
    assert [block.splitlines()[0] for block in arrays] == [
        "# array 1 of 3: 2 tasks", "# array 2 of 3: 2 tasks", "# array 3 of 3: 1 task"]
    first, second, third = arrays
    assert "#   task 0: masks-1of2\n#   task 1: masks-2of2" in first
    assert "#   task 1: run/multi_similarity-bgaugment-seed0" in second
    for block in arrays:
        for line in ("#SBATCH --partition=gpu", "#SBATCH --time=720", "#SBATCH --gpus-per-task=2",
                     "#SBATCH --job-name=bgbias-study", "#SBATCH --qos=high", "#SBATCH --signal=USR2@90"):
            assert line in block.splitlines()
    assert "#SBATCH --array=0-1%1" in first
    assert "--dependency" not in first
    assert "#SBATCH --dependency=afterany:ARRAY1_JOB_ID" in second
    assert f"#SBATCH --output={tmp_path.absolute() / SLURM_FOLDER}/%A_%a/%A_%a_0_log.out" in second
    assert "--array" not in third  # one task is a job of its own, as submitit submits it
    assert f"--output={tmp_path.absolute() / SLURM_FOLDER}/%j/%j_0_log.out" in third
    assert "#SBATCH --dependency=afterany:ARRAY2_JOB_ID" in third
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


def test_nothing_to_submit():
    assert submission_text(Path("study"), [[], []], SlurmOptions()).startswith("# nothing to submit")


def test_the_submission_text_renders_flags_and_other_parameters_as_submitit_does(tmp_path):
    options = slurm_options(opts=["exclusive=true", "stderr_to_stdout=true", "signal_delay_s=300",
                                  "comment=two words"])
    lines = submission_text(tmp_path, [["run/x"]], options).splitlines()
    assert {"#SBATCH --exclusive", "#SBATCH --signal=USR2@300", "#SBATCH --comment='two words'",
            "#SBATCH --nodes=1", "#SBATCH --wckey=submitit"} <= set(lines)
    assert not any(line.startswith("#SBATCH --error") for line in lines)  # stderr goes to the output


# --- the arrays, through submitit's executors ------------------------------------------------------------


def _study_folder(tmp_path: Path, stages: list[list[str]] = STAGES) -> Path:
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / standins.STAGES).write_text(json.dumps(stages))
    return folder


def _calls(folder: Path) -> list[dict]:
    return sorted((json.loads(path.read_text()) for path in (folder / "calls").iterdir()),
                  key=lambda call: call["step"])


def _check_every_step_once_in_stage_order(folder: Path, stages: list[list[str]] = STAGES) -> None:
    calls = _calls(folder)
    assert sorted(call["step"] for call in calls) == sorted(step for steps in stages for step in steps)
    masks = {standins.marker(step) for step in stages[0]}
    for call in calls:
        assert call["goals"] == list(GOALS)
        if call["step"].startswith("run/"):
            assert masks <= set(call["done_before"]), f"{call['step']} ran before the masks were done"


def test_debug_executor_runs_each_step_once_in_stage_order(tmp_path):
    folder = _study_folder(tmp_path)
    executor = submitit.DebugExecutor(folder / SLURM_FOLDER / "%j")
    jobs = submit_study(folder, GOALS, [[], *STAGES], SlurmOptions(), executor=executor,
                        worker=standins.recording_work)
    assert [job.result() for job in jobs] == [f"did {step}" for steps in STAGES for step in steps]
    _check_every_step_once_in_stage_order(folder)
    submitted = json.loads((folder / SLURM_FOLDER / SUBMITTED).read_text())["submissions"]
    assert len(submitted) == 1
    first, second = submitted[0]["arrays"]
    assert [task["step"] for task in first["tasks"]] == STAGES[0]
    assert [task["step"] for task in second["tasks"]] == STAGES[1]
    assert [task["job_id"] for task in first["tasks"] + second["tasks"]] == [job.job_id for job in jobs]
    assert first["dependency"] is None
    assert second["dependency"] == f"afterany:{first['job_id']}"
    assert executor.parameters["dependency"] == second["dependency"]


def test_a_second_submission_is_added_to_the_record(tmp_path):
    folder = _study_folder(tmp_path)
    executor = submitit.DebugExecutor(folder / SLURM_FOLDER / "%j")
    submit_study(folder, GOALS, STAGES, SlurmOptions(), executor=executor, worker=standins.recording_work)
    jobs = submit_study(folder, GOALS, [[], [STAGES[1][0]]], SlurmOptions(), executor=executor,
                        worker=standins.recording_work)
    assert len(jobs) == 1
    submissions = json.loads((folder / SLURM_FOLDER / SUBMITTED).read_text())["submissions"]
    assert [len(submission["arrays"]) for submission in submissions] == [2, 1]
    assert submissions[1]["arrays"][0]["tasks"] == [{"job_id": jobs[0].job_id, "step": STAGES[1][0]}]
    assert submissions[1]["arrays"][0]["dependency"] is None


def test_nothing_pending_submits_nothing(tmp_path):
    assert submit_study(tmp_path, GOALS, [[], []], SlurmOptions()) == []
    assert not (tmp_path / SLURM_FOLDER).exists()


def test_a_task_is_checkpointed_as_itself():
    task = StudyTask(Path("/study"), GOALS, "run/x", worker=standins.recording_work)
    delayed = task.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert delayed.function is task
    assert delayed.args == () and delayed.kwargs == {}


def _self_preempting_work(folder: Path, goals, *, only=None, device="auto") -> str:
    try:
        os.kill(os.getpid(), preemption_signal())
        time.sleep(5)
        return "not preempted"
    finally:
        (folder / "released").write_text(only)


def test_the_preemption_signal_interrupts_the_worker_then_submitit_requeues(tmp_path):
    handed = []

    def submitits_handler(signum, frame):  # submitit's checkpoint_and_try_requeue: requeues, then exits
        handed.append((signum, (tmp_path / "released").exists()))
        raise SystemExit(144)

    previous = signal.signal(preemption_signal(), submitits_handler)
    try:
        with pytest.raises(SystemExit):
            StudyTask(tmp_path, GOALS, "run/x", worker=_self_preempting_work)()
        assert handed == [(preemption_signal(), True)], "submitit's handler runs once the worker let go"
        assert signal.getsignal(preemption_signal()) is submitits_handler
    finally:
        signal.signal(preemption_signal(), previous)


def _swallowing_work(folder: Path, goals, *, only=None, device="auto") -> str:
    try:
        os.kill(os.getpid(), preemption_signal())
        time.sleep(5)
    except Terminated:
        return "interrupted, and said so"
    return "not preempted"


def test_a_preempted_task_is_requeued_even_where_the_worker_returned(tmp_path):
    handed = []

    def submitits_handler(signum, frame):
        handed.append(signum)
        raise SystemExit(144)

    previous = signal.signal(preemption_signal(), submitits_handler)
    try:
        with pytest.raises(SystemExit):
            StudyTask(tmp_path, GOALS, "run/x", worker=_swallowing_work)()
    finally:
        signal.signal(preemption_signal(), previous)
    assert handed == [preemption_signal()]


def _handler_seen_work(folder: Path, goals, *, only=None, device="auto"):
    return signal.getsignal(preemption_signal())


def test_outside_a_submitit_job_the_preemption_signal_is_left_alone(tmp_path):
    previous = signal.signal(preemption_signal(), signal.SIG_DFL)
    try:
        assert StudyTask(tmp_path, GOALS, "run/x", worker=_handler_seen_work)() is signal.SIG_DFL
    finally:
        signal.signal(preemption_signal(), previous)


def _terminated_work(folder: Path, goals, *, only=None, device="auto") -> str:
    raise Terminated("stopped by SIGTERM")


def test_an_interruption_that_is_no_preemption_is_not_requeued(tmp_path):
    handed = []
    previous = signal.signal(preemption_signal(), lambda signum, frame: handed.append(signum))
    try:
        with pytest.raises(Terminated):
            StudyTask(tmp_path, GOALS, "run/x", worker=_terminated_work)()
    finally:
        signal.signal(preemption_signal(), previous)
    assert handed == []


def _local_executor(folder: Path, monkeypatch) -> submitit.LocalExecutor:
    # The tasks are subprocesses that unpickle the stand-ins: they import this checkout's bgbias and tests.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    executor = submitit.LocalExecutor(folder / SLURM_FOLDER / "%j")
    executor.update_parameters(timeout_min=5)
    return executor


@pytest.mark.slow
def test_local_executor_runs_each_step_once_in_stage_order(tmp_path, monkeypatch):
    """Two masks tasks, then one run (a task imports torch: each one costs seconds); the debug executor's
    test above runs the stages of two tasks each."""
    stages = [STAGES[0], STAGES[1][:1]]
    folder = _study_folder(tmp_path, stages)
    jobs = submit_study(folder, GOALS, stages, SlurmOptions(), executor=_local_executor(folder, monkeypatch),
                        worker=standins.recording_work)
    assert [job.result() for job in jobs] == [f"did {step}" for steps in stages for step in steps]
    _check_every_step_once_in_stage_order(folder, stages)
    assert len({call["pid"] for call in _calls(folder)}) == 3, "each task is a process of its own"
    submitted = json.loads((folder / SLURM_FOLDER / SUBMITTED).read_text())["submissions"][0]["arrays"]
    assert submitted[1]["dependency"] == f"afterany:{':'.join(job.job_id for job in jobs[:2])}"


@pytest.mark.slow
def test_a_preempted_local_task_requeues_and_completes(tmp_path, monkeypatch):
    folder = _study_folder(tmp_path)
    [job] = submit_study(folder, GOALS, [["run/x"]], SlurmOptions(),
                         executor=_local_executor(folder, monkeypatch), worker=standins.preemptible_work)
    first = folder / "attempts" / "1"
    deadline = time.monotonic() + standins.WAIT_S
    while not first.exists() or not first.read_text():
        assert time.monotonic() < deadline and job.state == "RUNNING", job.stderr()
        time.sleep(0.05)
    # What SLURM sends at preemption or before the time limit, to the task's process (submitit's own
    # LocalJob._interrupt signals the controller instead, which has no handler for it).
    os.kill(int(first.read_text()), preemption_signal())
    assert job.result() == "resumed run/x at attempt 2"
    assert (folder / "interrupted").read_text().startswith("Terminated: stopped by SIGUSR2")
    assert sorted(path.name for path in (folder / "attempts").iterdir()) == ["1", "2"]
    log = job.stdout()
    assert "Calling checkpoint method" in log and "Requeued job" in log


@pytest.mark.slow
def test_a_local_task_at_its_time_limit_requeues_and_completes(tmp_path, monkeypatch):
    """submitit's own time limit: its local controller sends the preemption signal ``signal_delay_s`` before
    ``timeout_min``, as SLURM does (``--signal=USR2@90``). The signal comes 18 s in: the task installs its
    handler only once it has unpickled its function, which imports bgbias's study worker (about 7 s on the
    2-core machine, over 10 s when the suite loads it), and an earlier signal would kill it outright."""
    folder = _study_folder(tmp_path)
    executor = _local_executor(folder, monkeypatch)
    executor.update_parameters(timeout_min=0.4, signal_delay_s=6)  # the signal 18 s in, the kill at 24 s
    [job] = submit_study(folder, GOALS, [["run/x"]], SlurmOptions(), executor=executor,
                         worker=standins.preemptible_work)
    assert job.result() == "resumed run/x at attempt 2"
    assert (folder / "interrupted").read_text().startswith("Terminated: stopped by SIGUSR2")
    log = job.stdout()
    assert "this job is timed-out" in log and "(2 remaining timeouts)" in log
