"""``kedro sweep``: sequences × architectures × methods × seeds on a Dask cluster.

:mod:`~.graph` resolves the work, :mod:`~.cluster` starts (or joins) the cluster and the MLflow
server, :mod:`~.driver` submits and follows the graph, :mod:`~.work` is what workers run, and
:mod:`~.command` ties them to the command line.
"""
