"""``bgbias study --executor slurm``: the study's pending steps as SLURM job arrays, through submitit.

One array per stage, each task one step (:class:`StudyTask`); a later stage waits for the one before
(``afterany``), and a task also waits for its step's dependencies in the worker, so executors that ignore
dependencies run the same arrays. State lives in the study folder, never in a task: a requeued task runs its
step again, and its training resumes. submitit's preemption signal (USR2, before the time limit or on
preemption) ends the step as SIGTERM ends a worker, then submitit requeues the task; SIGTERM itself is left
to submitit, which ignores it, since some clusters send it before their preemption signal.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import signal
import threading
import types
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.errors import OptionError
from bgbias.fileio import write_json_atomic
from bgbias.schema import ClosedRecord, read_record
from bgbias.signals import Terminated
from bgbias.study.worker import work as study_work

if TYPE_CHECKING:
    import submitit

JOB_NAME = "bgbias-study"
"""The name of every job the study submits (``squeue --name bgbias-study``)."""

DEFAULT_TIME = 24 * 60
"""``--slurm-time`` when not given, in minutes: a step that needs longer is requeued at its limit, and
resumes."""

SLURM_FOLDER = "slurm"
"""In a study folder: submitit's folder (one subfolder per job, ``%j``: its pickles and logs) and
:data:`SUBMITTED`."""

SUBMITTED = "submitted.json"
"""In :data:`SLURM_FOLDER`: every submission made for the study folder: when, and each array's job id, the job
it waited for and the step of each of its tasks."""

INSTALL = "pip install 'bgbias[slurm]'"

OWN_OPTIONS = {"partition": "--slurm-partition", "time": "--slurm-time",
               "gpus_per_task": "--slurm-gpus-per-task", "cpus_per_task": "--slurm-cpus-per-task",
               "array_parallelism": "--slurm-array-parallelism"}
"""submitit's parameters that ``--slurm-opt`` may not set: the option of each."""

SET_BY_THE_STUDY = {
    "job_name": "the study names its jobs itself",
    "nodes": "a task is one process on one node",
    "ntasks_per_node": "a task is one process on one node",
    "num_gpus": "a task's GPUs are --slurm-gpus-per-task",
    "gpus_per_node": "a task's GPUs are --slurm-gpus-per-task",
    "dependency": "the study makes each stage wait for the one before it",
    "setup": "it is a list of commands, not one value",
    "teardown": "it is a list of commands, not one value",
    "srun_args": "it is a list of arguments, not one value",
    "additional_parameters": "it is a mapping, not one value",
}
"""submitit's parameters that ``--slurm-opt`` may not set either, and why."""


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how the study's tasks run on SLURM (None: the cluster's or submitit's default); ``time`` in
    minutes, ``extra`` the further submitit parameters (``--slurm-opt``)."""

    partition: str | None = None
    time: int = DEFAULT_TIME
    gpus_per_task: int = 1
    cpus_per_task: int | None = None
    array_parallelism: int | None = None
    extra: Mapping[str, str | int | bool] = dataclasses.field(default_factory=dict)


def slurm_options(
    partition: str | None = None,
    time: str | None = None,
    gpus_per_task: str | None = None,
    cpus_per_task: str | None = None,
    array_parallelism: str | None = None,
    opts: Sequence[str] = (),
) -> SlurmOptions:
    """The options as the command line gives them (``--slurm-partition`` … ``--slurm-opt key=value``,
    repeatable); a value that is not valid is an ``OptionError`` that names its option."""
    return checked_options(SlurmOptions(
        partition=partition or None,
        time=DEFAULT_TIME if time is None else parse_time(time),
        gpus_per_task=1 if gpus_per_task is None else _count("--slurm-gpus-per-task", gpus_per_task, least=0),
        cpus_per_task=None if cpus_per_task is None else _count("--slurm-cpus-per-task", cpus_per_task),
        array_parallelism=None if array_parallelism is None else _count("--slurm-array-parallelism",
                                                                         array_parallelism),
        extra=parse_slurm_opts(opts),
    ))


def checked_options(options: SlurmOptions) -> SlurmOptions:
    """``options``, once every text value of them is one the batch script can hold (:func:`script_value`) and
    submitit takes every ``--slurm-opt`` key (:func:`configured`)."""
    configured(_offline_executor(Path(SLURM_FOLDER)), options)
    return options


def script_value(value: str, what: str, *, path: str | os.PathLike[str] | None = None) -> str:
    """``value`` (of the option or thing ``what``), refused when it holds a control character: submitit
    writes each value into the batch script after ``shlex.quote``, which keeps a newline as it is, so a line
    break would start a line of its own there (a command, an ``#SBATCH`` directive)."""
    bad = next((char for char in value if unicodedata.category(char) == "Cc"), None)
    if bad is not None:
        raise OptionError(f"{what} holds the control character {bad!r}: in the SLURM batch script it could "
                          "start a line of its own (a command or a directive)", path=path,
                          fix="give it without line breaks, tabs or other control characters")
    return value


def parse_time(text: str) -> int:
    """``--slurm-time``: minutes (``90``) or ``HH:MM:SS`` (``36:00:00``), as whole minutes (seconds round
    up)."""
    match = re.fullmatch(r"\s*(?:(\d+)|(\d+):([0-5]?\d):([0-5]?\d))\s*", text)
    if match is None:
        raise OptionError(f"--slurm-time takes minutes or HH:MM:SS, not {text!r}",
                          fix="pass e.g. --slurm-time 720 or --slurm-time 12:00:00")
    minutes = int(match[1]) if match[1] is not None else math.ceil(
        (int(match[2]) * 3600 + int(match[3]) * 60 + int(match[4])) / 60)
    if minutes < 1:
        raise OptionError(f"--slurm-time must be at least one minute, not {text!r}",
                          fix="pass e.g. --slurm-time 720 or --slurm-time 12:00:00")
    return minutes


def _count(option: str, text: str, *, least: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise OptionError(f"{option} takes a whole number of at least {least}, not {text!r}",
                          fix=f"pass e.g. {option} {max(least, 1)}")
    return value


FLAGS = {"true": True, "false": False}
"""``--slurm-opt`` values that are flags."""


def parse_slurm_opts(opts: Sequence[str]) -> dict[str, str | int | bool]:
    """``--slurm-opt key=value`` (repeatable) as submitit's SLURM parameters: ``mail-type`` and ``mail_type``
    alike; the value a whole number, ``true``/``false`` (a flag: ``exclusive=true`` gives sbatch's bare
    ``--exclusive``) or the text. Keys that options of their own set, keys the study sets itself and keys
    given twice are an ``OptionError``; submitit checks the names (:func:`configured`)."""
    parsed: dict[str, str | int | bool] = {}
    for text in opts:
        key, equals, value = text.partition("=")
        key, value = key.strip().replace("-", "_"), value.strip()
        if not equals or not key:
            raise OptionError(f"--slurm-opt takes key=value, not {text!r}",
                              fix="pass e.g. --slurm-opt qos=high --slurm-opt mem=64G")
        if not value:
            raise OptionError(f"--slurm-opt {key} has no value", fix=f"pass --slurm-opt {key}=VALUE")
        if key in OWN_OPTIONS:
            raise OptionError(f"--slurm-opt {key} is set with an option of its own",
                              fix=f"pass {OWN_OPTIONS[key]} instead")
        if key in SET_BY_THE_STUDY:
            raise OptionError(f"--slurm-opt cannot set {key}: {SET_BY_THE_STUDY[key]}",
                              fix="leave it out; --slurm-opt takes submitit's other SLURM parameters, e.g. "
                                  "qos, mem, account, constraint, mail_type")
        if key in parsed:
            raise OptionError(f"--slurm-opt {key} is given twice", fix="give each key once")
        parsed[key] = FLAGS.get(value.lower(), int(value) if re.fullmatch(r"-?\d+", value) else value)
    return parsed


def import_submitit() -> types.ModuleType:
    """submitit, or an ``OptionError`` that says how to install it."""
    try:
        import submitit
    except ImportError:
        raise OptionError("--executor slurm needs submitit, which is not installed",
                          fix=f"install it with: {INSTALL}") from None
    return submitit


def slurm_parameters(options: SlurmOptions) -> dict[str, Any]:
    """The parameters of submitit's SlurmExecutor for ``options`` (what :func:`configured` gives it), once
    their text values are ones the batch script can hold (:func:`script_value`)."""
    if options.partition is not None:
        script_value(options.partition, "--slurm-partition")
    for key, value in options.extra.items():
        if isinstance(value, str):
            script_value(value, f"--slurm-opt {key}")
    parameters: dict[str, Any] = {"job_name": JOB_NAME, "time": options.time,
                                  "gpus_per_task": options.gpus_per_task}
    named = {"partition": options.partition, "cpus_per_task": options.cpus_per_task,
             "array_parallelism": options.array_parallelism}
    parameters.update({key: value for key, value in named.items() if value is not None})
    parameters.update(options.extra)
    return parameters


def configured(executor: submitit.SlurmExecutor, options: SlurmOptions) -> submitit.SlurmExecutor:
    """``executor`` given :func:`slurm_parameters` of ``options`` through submitit's own
    ``update_parameters``, which refuses a name it does not know: then an ``OptionError`` that names the
    ``--slurm-opt`` key and the parameters submitit lists."""
    for key, value in slurm_parameters(options).items():
        try:
            executor.update_parameters(**{key: value})
        except ValueError as error:
            listed = re.findall(r"^\s+- (\w+)", str(error), re.MULTILINE)
            settable = [name for name in listed if name not in OWN_OPTIONS and name not in SET_BY_THE_STUDY]
            raise OptionError(f"--slurm-opt {key}: submitit knows no such SLURM parameter",
                              fix=f"use one of: {', '.join(settable)}") from None
    return executor


def _offline_executor(folder: Path) -> submitit.SlurmExecutor:
    """submitit's SlurmExecutor on a machine that may lack SLURM's commands: it checks parameters and renders
    the batch script as the real one does, and submits nothing (submitit refuses to make one without srun on
    the PATH, which it reads through ``affinity``)."""
    submitit = import_submitit()

    class OfflineSlurmExecutor(submitit.SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:
            return 1

    return OfflineSlurmExecutor(folder)


@dataclass(frozen=True)
class StudyTask:
    """One array task: execute the step ``only`` of the study folder's plan (after its dependencies) toward
    ``goals``; ``worker`` None is :func:`bgbias.study.worker.work`. Pickled by submitit into the job's folder,
    so it holds no state but its arguments."""

    folder: Path
    goals: tuple[str, ...]
    only: str
    device: str = "auto"
    worker: Callable[..., object] | None = None  # None: bgbias.study.worker.work

    def __call__(self) -> object:
        """The worker's outcome. In a submitit job, submitit's preemption signal raises
        :class:`~bgbias.signals.Terminated` (once: a second signal must not break the first one's clean-up)
        instead of calling submitit's handler, which runs once the worker has let go of the step (whether it
        raised or returned): it checkpoints and requeues the task, which ends the process (or raises
        submitit's error when it has requeued too often; a task other than the job's first returns from it,
        and the interruption goes on). A requeued task whose step is done finds nothing to do. Outside a
        submitit job (no handler of that signal) and outside the main thread nothing changes."""
        work = self.worker if self.worker is not None else study_work
        signum = preemption_signal()
        handler = signal.getsignal(signum) if threading.current_thread() is threading.main_thread() else None
        if not callable(handler):
            return work(self.folder, self.goals, only=self.only, device=self.device)
        caught: list[tuple[int, types.FrameType | None]] = []

        def interrupt(number: int, frame: types.FrameType | None) -> None:
            if not caught:
                caught.append((number, frame))
                name = signal.Signals(number).name
                raise Terminated(f"stopped by {name} (preempted, or at the time limit)")

        signal.signal(signum, interrupt)
        try:
            outcome = work(self.folder, self.goals, only=self.only, device=self.device)
        except Terminated:
            if not caught:  # a SIGTERM or Ctrl-C the worker let through: no requeue
                raise
        finally:
            signal.signal(signum, handler)
        if not caught:
            return outcome
        handler(*caught[0])
        raise Terminated(f"stopped by {signal.Signals(caught[0][0]).name}")

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        """What submitit requeues after a preemption or a time limit: the same task; its step's state is in
        the study folder (the worker resumes the training from its last checkpoint)."""
        return import_submitit().helpers.DelayedSubmission(self)


def preemption_signal() -> signal.Signals:
    """The signal submitit asks SLURM for before a time limit or a preemption (USR2 unless the environment
    says otherwise, ``SUBMITIT_PREEMPT_SIGNAL``)."""
    return signal.Signals[f"SIG{import_submitit().JobEnvironment.USR_SIG}"]


class SubmittedTask(ClosedRecord):
    """A task of an array: its job id (SLURM: ``<array>_<index>``) and the step it executes."""

    job_id: str
    step: str


class SubmittedArray(ClosedRecord):
    """One array of :data:`SUBMITTED`: its job id, the jobs it waits for (``afterany:…``, None for the first
    stage), and its tasks in order."""

    job_id: str
    dependency: str | None
    tasks: list[SubmittedTask]


class Submission(ClosedRecord):
    """One ``bgbias study --executor slurm`` of :data:`SUBMITTED`: when (UTC, ISO 8601), and its arrays."""

    time: str
    arrays: list[SubmittedArray]


class Submissions(ClosedRecord):
    submissions: list[Submission]


def slurm_executor(folder: Path, options: SlurmOptions) -> submitit.SlurmExecutor:
    """submitit's SlurmExecutor on the study folder's :data:`SLURM_FOLDER` (``%j``: a folder per job) with
    ``options``; without SLURM's commands here an ``OptionError``."""
    submitit = import_submitit()
    try:
        executor = submitit.SlurmExecutor(folder / SLURM_FOLDER / "%j")
    except RuntimeError as error:  # submitit's check that srun is on the PATH
        raise OptionError(f"--executor slurm needs SLURM's commands (srun, sbatch): {error}",
                          fix="run the study on a login node of the cluster, or see the submission it would "
                              "make with --dry-run") from None
    return configured(executor, options)


def submit_study(
    folder: Path,
    goals: Sequence[str],
    stages: Sequence[Sequence[str]],
    options: SlurmOptions,
    *,
    executor: submitit.Executor | None = None,
    worker: Callable[..., object] | None = None,
) -> list[submitit.Job[Any]]:
    """Submit one job array per non-empty stage of ``stages`` (step ids), each waiting for the one before
    (``afterany``), through ``executor`` (None: :func:`slurm_executor` with ``options``); record the
    submission in :data:`SUBMITTED` and return the jobs, the stages' tasks in order."""
    folder = Path(folder).absolute()
    script_value(str(folder), "the study folder's path", path=folder)
    arrays = [list(steps) for steps in stages if steps]
    if executor is None and arrays:
        executor = slurm_executor(folder, options)
    jobs: list[submitit.Job[Any]] = []
    submitted: list[SubmittedArray] = []
    try:
        for steps in arrays:
            assert executor is not None
            dependency = f"afterany:{submitted[-1].job_id}" if submitted else None
            if dependency is not None:
                executor.update_parameters(dependency=dependency)
            tasks = [StudyTask(folder, tuple(goals), step, worker=worker) for step in steps]
            array = executor.submit_array(tasks)
            jobs += array
            recorded = [SubmittedTask(job_id=job.job_id, step=step)
                          for job, step in zip(array, steps, strict=True)]
            # A dependency names an array by its job id, without the task index (SLURM: ``1234_5`` →
            # ``1234``); a local executor's tasks are jobs of their own.
            ids = dict.fromkeys(job.job_id.split("_")[0] for job in array)
            submitted.append(SubmittedArray(job_id=":".join(ids), dependency=dependency, tasks=recorded))
    finally:
        if submitted:
            record_submission(folder / SLURM_FOLDER / SUBMITTED, submitted)
    return jobs


def record_submission(path: Path, arrays: Sequence[SubmittedArray]) -> None:
    """Add a submission of ``arrays``, now, to :data:`SUBMITTED` (written atomically)."""
    earlier: list[Submission] = []
    if path.exists():
        earlier = read_record(path, Submissions, what="the study's SLURM submissions",
                              fix="move the file aside; the next submission writes a new one").submissions
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    record = Submissions(submissions=[*earlier, Submission(time=now, arrays=list(arrays))])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record.model_dump())


def submission_text(folder: Path, stages: Sequence[Sequence[str]], options: SlurmOptions) -> str:
    """What ``--executor slurm --dry-run`` prints: for each array the steps of its tasks and the #SBATCH lines
    of the script submitit would submit for it (:func:`sbatch_lines`); nothing is submitted."""
    import_submitit()
    script_value(str(Path(folder).absolute()), "the study folder's path", path=folder)
    arrays = [list(steps) for steps in stages if steps]
    blocks = []
    for number, steps in enumerate(arrays, 1):
        dependency = f"afterany:ARRAY{number - 1}_JOB_ID" if number > 1 else None
        header = f"# array {number} of {len(arrays)}: {len(steps)} task{'s' * (len(steps) > 1)}"
        tasks = [f"#   task {index}: {step}" for index, step in enumerate(steps)]
        logs = Path(folder).absolute() / SLURM_FOLDER
        blocks.append("\n".join([header, *tasks, *sbatch_lines(options, dependency, len(steps), logs)]))
    return "\n\n".join(blocks) + "\n" if blocks else "# nothing to submit: every step is done\n"


def sbatch_lines(options: SlurmOptions, dependency: str | None, tasks: int, logs: Path) -> list[str]:
    """The #SBATCH lines of the script submitit submits for ``tasks`` tasks (an array from two on) with
    ``options`` and ``dependency``, its logs in ``logs``/``%j``: rendered by submitit itself, on an executor
    that submits nothing, with the task count an array's copy of the executor gets."""
    executor = configured(_offline_executor(logs / "%j"), options)
    if dependency is not None:
        executor.update_parameters(dependency=dependency)
    if tasks > 1:
        executor.parameters["map_count"] = tasks
    script = executor._make_submission_file_text("", "")
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]
