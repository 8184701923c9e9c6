"""Training REGAL's policies: the layer above the searches (it runs them to score a policy), so
nothing of `regal.policy`, which the searches import to run a policy, imports this package.

    reinforce   REINFORCE on BRKGA's peak or makespan (`train`, `TrainConfig`; the entry point)
    rewards     one BRKGA run's peak or makespan: a Dask task of `reinforce`
    start       the start-choice head (issue 34), trained on the flagship's outcomes
    moves       the move head (issue 47): imitation of the flagship's improving picks, then REINFORCE
    data        their data: the corpus' cells and the flagship runs collected on them, cached
    heads       `regal train --head start|moves`: the learned policy's recipe, one call per head
    config, learner, evaluation, checkpoint, curves: the parts of `reinforce`; import
    `regal.training.reinforce`, not these.
"""
