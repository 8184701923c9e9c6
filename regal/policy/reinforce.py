"""Moved to `regal.training.reinforce` (issue 49: training sits above the searches, outside
`regal.policy`). This name stays only until `regal/commands/train.py` imports the new one;
nothing else in the repository uses it. Delete it then."""

from regal.training.reinforce import *  # noqa: F401,F403
from regal.training.reinforce import CheckpointError, TrainConfig, check_resume, run_setup, train  # noqa: F401
