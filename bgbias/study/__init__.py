"""The paper's whole measurement as one command, on the bench (the embedded default) or any dataset, on
whatever hardware the user has: from nothing to the study page (docs/study.md).

Steps: the bench or the dataset's check and the background pools, the U²-Net masks (in shards), each planned
run trained without and with BGAugment for each of its training seeds (:data:`~bgbias.study.plan.PRESETS`:
``quick``, one loss and one seed; ``full``, the paper's baselines and the four bundled methods, three seeds),
scored on the clean test split and its fixed corrupted repeats (and its background-reliance profile in the
full preset) with its foreground scores, then one page: Table 1 of training seed 0 and the seeds' aggregate
with BGAugment's paired effect. Each step is also a command of its own (``bgbias assets``, ``masks``,
``train``, ``eval``, ``explain``, ``report``), and each is resumable.

The modules: :mod:`~bgbias.study.spec` (what a study is about: dataset, masks, pools; each run's configuration
in :mod:`~bgbias.study.runs`), :mod:`~bgbias.study.plan` (which runs), :mod:`~bgbias.study.steps` (the plan's
steps and what each does, with :mod:`~bgbias.study.bench`, :mod:`~bgbias.study.runs` and
:mod:`~bgbias.study.page`), :mod:`~bgbias.study.ledger` (the study folder's plan, its states and claims),
:mod:`~bgbias.study.worker` (the loop every worker runs), the executors :mod:`~bgbias.study.local` and
:mod:`~bgbias.study.slurm`, :mod:`~bgbias.study.pipeline` (a plan recorded and worked through),
:mod:`~bgbias.study.status`, :mod:`~bgbias.study.dry_run` with :mod:`~bgbias.study.cost` (the dataset's split
sizes, counted or known, in :mod:`~bgbias.study.sizes`), and :mod:`~bgbias.study.dial` (the bias dial, a study
per ρ).
"""
