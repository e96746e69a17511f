"""The main job on the embedded default: the paper's whole measurement on the bench, from nothing to Table 1.

Steps: provision the assets, complete the background pools, build the bench, make its masks (U²-Net's, or lay
out its exact ones), train the plan's methods without and with BGAugment for each of its training seeds
(:data:`~bgbias.study.plan.PRESETS`: ``quick``, one loss and one seed; ``full``, the paper's baselines and the
four bundled methods, three seeds), score every run on the clean test split and its fixed corrupted repeats
(and its background-reliance profile in the full preset), compute their foreground scores (SmoothGrad, and a
method's own attribution where it has one), and put everything in one report: Table 1 of training seed 0 and
the seeds' aggregate with BGAugment's paired effect. Each step is also a command of its own (``bgbias
assets``, ``masks``, ``train``, ``eval``, ``explain``, ``report``), and each is resumable: a second run reuses
the bench, the masks, finished trainings and cached embeddings, and resumes a killed training.

The modules follow the steps: :mod:`~bgbias.study.plan` (which runs), :mod:`~bgbias.study.bench` (steps
1–4), :mod:`~bgbias.study.runs` (5–6), :mod:`~bgbias.study.page` (7), :mod:`~bgbias.study.pipeline` (all of
them for one plan) and :mod:`~bgbias.study.dial` (the bias dial, a study per ρ).
"""
