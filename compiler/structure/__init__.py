"""The table strategies: the decision diagram and its slicing into staged tables, the bit-vector
stage, and the cost model that picks one."""
