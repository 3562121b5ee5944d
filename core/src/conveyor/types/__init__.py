"""The vocabulary: dtypes, layouts, operation plans, execution options, capabilities, warnings.

Pure data and the rules over it (promotion, broadcasting, view algebra, plan resolution). Nothing
here knows a Tensor, an Operation or a carrier instance, so every other part builds on it.
"""
