"""Training REGAL's policies: the layer above the searches (it runs them to score a policy), so
nothing of `regal.policy`, which the searches import to run a policy, imports this package.

    reinforce   REINFORCE on BRKGA's peak or makespan (`train`, `TrainConfig`; the entry point)
    rewards     one BRKGA run's peak or makespan: a Dask task of `reinforce`
    start       the start-choice head (issue 34), trained on the flagship's outcomes
    config, learner, evaluation, checkpoint, curves: the parts of `reinforce`; import
    `regal.training.reinforce`, not these.
"""
