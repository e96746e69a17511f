"""Attribution maps and the paper's foreground score (eqs. 2–4): does a model look at the object?"""
