"""``bgbias audit``: outside encoders (and runs) scored side by side on one dataset, clean, corrupted, the
background-reliance profile and the dataset's leakage seen through each, in one ranked page (docs/audit.md):
the entries and their labels (:mod:`~bgbias.model_audit.entries`), the measurement and its resume
(:mod:`~bgbias.model_audit.run`), each model's record (:mod:`~bgbias.model_audit.outcome`) and the page
(:mod:`~bgbias.model_audit.page`)."""
