"""How a set of images is ranked and scored: per-image state, the retrieval searches, and MAP@R.

It sits below the methods, which supply their retrieval object, and knows nothing of them: a search takes
named arrays and, where the similarity is learned, a distance callable.
"""
