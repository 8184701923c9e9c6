"""The parts of `regal.policy.reinforce` (REGAL's policy trained with REINFORCE): `config`,
`learner`, `evaluation`, `checkpoint`, `curves`. Import `regal.policy.reinforce`, not these."""
