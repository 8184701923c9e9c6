"""The `regal` commands, one module per group of them (`regal.cli` registers each on its group
`main`): graphs (info, import-hlo, import-onnx), optimize, solve, evaluate (evaluate, plot),
train, pack (pack, fit), torch; `report` holds the solution reports optimize and solve share,
`program` the group itself (start-up, signals, exit). They import `regal.cli_common`, never
`regal.cli`."""
