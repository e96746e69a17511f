"""The paper's whole measurement as one command, on the bench or any dataset, on whatever hardware the user
has: from nothing to the study page (docs/study.md; its steps and modules: docs/design.md, *The study*).
"""
