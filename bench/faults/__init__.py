"""A Jepsen-style fault harness: a cluster in network namespaces under a nemesis, a
workload recording every operation, and a checker of the recorded history.

    python -m bench.faults --minutes 30 [--system kbroker|kafka] [--seed N]
"""
